"""Plain-text terminal output: the report's document (fusion_sweep.analysis.document, the
same blocks in the same order as the Markdown and HTML) rendered for a terminal: the answer
in words first, the claims, the verdict grid, the rule, warnings, one short table per regime.

Every line fits the terminal's width (`terminal_width`: COLUMNS or the terminal, WIDTH when
stdout is no terminal): text cells, sentences and footnotes wrap, and each regime gets the
short table of what decides its verdicts. `wide=True` (`stats --wide`) prints every column of
every table on one line each, however long; its sentences and notes still wrap. Verdict words
are coloured only on a terminal (`use_color`: never in a pipe or file, never with NO_COLOR).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from typing import TextIO

from fusion_sweep.analysis.claims import ClaimSetResult
from fusion_sweep.analysis.document import (
    NARROW, WIDE, Block, Bullets, ClaimTests, Paragraph, TableBlock, build_document,
)
from fusion_sweep.analysis.report import Report
from fusion_sweep.analysis.tables import Table, claim_tests_table

WIDTH = 120  # the width when stdout is no terminal and COLUMNS is unset
MIN_WIDTH = 60  # narrower terminals get this width (and wrap)
MIN_WRAPPED = 10  # a wrapped text column never gets narrower than this


def terminal_width(stream: TextIO | None = None) -> int:
    """COLUMNS when set, else the terminal's width when `stream` (stdout) is one, else WIDTH;
    never below MIN_WIDTH."""
    stream = sys.stdout if stream is None else stream
    if not os.environ.get("COLUMNS") and not _isatty(stream):
        return WIDTH
    return max(MIN_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


def use_color(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal: never with NO_COLOR set (no-color.org), always with
    FORCE_COLOR set (and not empty or 0), never in a pipe or file or with TERM=dumb."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return _isatty(stream) and os.environ.get("TERM") != "dumb"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


# Verdict words and their SGR colours: better green, worse red, equivalent cyan, the
# undecided dim, an arm at chance yellow, an across-regime difference magenta.
COLORS = {"better": "32", "beats": "32", "beat": "32", "worse": "31", "is worse than": "31",
          "are worse than": "31", "equivalent": "36", "is equivalent to": "36",
          "are equivalent to": "36", "inconclusive": "2", "undecided": "2",
          "not decided": "2", "not learned": "33", "did not beat chance": "33",
          "withheld": "33", "differs": "35"}
_VERDICT_WORDS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, COLORS), key=len,
                                                     reverse=True)) + r")\b")


def paint(text: str, color: bool) -> str:
    """Verdict words in their colour (after layout: escapes take no column)."""
    if not color:
        return text
    return _VERDICT_WORDS.sub(lambda m: f"\x1b[{COLORS[m.group(1)]}m{m.group(1)}\x1b[0m", text)


def layout(table: Table, indent: str = "  ", width: int | None = None,
           notes_width: int | None = None) -> str:
    """Fixed-width columns; numbers right-aligned, text left-aligned; a cell's '\\n' starts a
    new line within it. With `width`, the widest text columns wrap onto continuation lines
    until the table fits, and the title and footnotes wrap too; `notes_width` (`--wide`:
    rows on one line each) wraps only the title and footnotes."""
    cols = list(zip(*([table.headers] + table.rows))) if table.rows else [[h] for h in table.headers]
    natural = [max(_cell_len(v) for v in col) for col in cols]
    widths = natural
    notes_width = width if notes_width is None else notes_width
    if width is not None:
        widths = _fit(cols, natural, width - len(indent))
        if _total(widths) > width - len(indent) and len(widths) > 2:
            cap = (width - len(indent)) // 2
            return _in_parts(table, [min(w, cap) for w in natural], indent, width)

    def lines(vals: list[str]) -> list[str]:
        parts = [[ln for seg in str(v).split("\n")
                  for ln in (_wrap_cell(seg, w) if len(seg) > w else [seg])]
                 for v, w in zip(vals, widths)]
        right = [is_numeric_cell(v) for v in vals]  # a wrapped cell keeps its alignment
        out = []
        for k in range(max(len(p) for p in parts)):
            cells = [(p[k] if k < len(p) else "") for p in parts]
            cells = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(cells, widths, right)]
            out.append(indent + "  ".join(cells).rstrip())
        return out

    out = _wrap_title(table.title, notes_width) + lines(table.headers)
    out.append(indent + "  ".join("-" * w for w in widths))
    out += [ln for r in table.rows for ln in lines(r)] or [indent + "(none)"]
    out += [ln for f in table.footnotes for ln in _wrap(f, notes_width, indent)]
    return "\n".join(out)


def _cell_len(v: object) -> int:
    """A cell's width: its longest line."""
    return max(len(seg) for seg in str(v).split("\n"))


def _wrap_cell(text: str, width: int) -> list[str]:
    """A cell's text on lines of at most `width`: at spaces, else after '/' or '-'."""
    spaced = text.replace("/", "/\x00").replace("-", "-\x00")
    words = [w for chunk in spaced.split(" ") for w in (chunk.split("\x00") + [" "])][:-1]
    lines, cur = [], ""
    for w in words:
        if w == " ":
            cur += " " if cur and len(cur) < width else ""
            continue
        if len(cur) + len(w) > width and cur.strip():
            lines.append(cur.rstrip())
            cur = ""
        while len(w) > width:  # a piece longer than the column: cut it
            lines.append(w[:width])
            w = w[width:]
        cur += w
    if cur.strip():
        lines.append(cur.rstrip())
    return lines or [""]


def _total(widths: list[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)


def _in_parts(table: Table, widths: list[int], indent: str, width: int) -> str:
    """A table too wide even with wrapped text: its columns in consecutive blocks, each
    repeating the first (label) column, each fitting `width`."""
    parts, current = [], [0]
    for i in range(1, len(widths)):
        if len(current) > 1 and _total([widths[j] for j in current + [i]]) > width - len(indent):
            parts.append(current)
            current = [0]
        current.append(i)
    parts.append(current)
    out = []
    for k, cols in enumerate(parts):
        pick = lambda row: [row[j] for j in cols]  # noqa: E731
        title = table.title if k == 0 else f"{table.title} (continued)"
        foot = table.footnotes if k == len(parts) - 1 else []
        out.append(layout(Table(title, pick(table.headers), [pick(r) for r in table.rows], foot),
                          indent, width))
    return "\n".join(out)


def _fit(cols: list, widths: list[int], width: int) -> list[int]:
    """Shrink the widest text (non-numeric) columns until the row fits `width`."""
    widths = list(widths)
    text = [i for i, col in enumerate(cols)
            if not all(is_numeric_cell(str(v)) or not v for v in col[1:])
            or any("\n" in str(v) for v in col)]
    while _total(widths) > width:
        wide = [i for i in text if widths[i] > MIN_WRAPPED]
        if not wide:
            break
        i = max(wide, key=lambda j: widths[j])
        widths[i] -= 1
    return widths


def _wrap_title(title: str, width: int | None) -> list[str]:
    """A title on lines of at most `width`, broken at its ' · ' separators first, so a
    part (a regime, a group, 'metric (direction) (label)') stays whole where it fits."""
    if width is None or len(title) <= width:
        return [title]
    lines, cur = [], ""
    for part in title.split(" · "):
        joined = f"{cur} · {part}" if cur else part
        if len(joined) <= width:
            cur = joined
            continue
        if cur:
            lines.append(cur + " ·")
        cur = "  " + part if len(part) + 2 <= width else ""
        if not cur:
            lines += _wrap(part, width, "  ")
    return lines + ([cur] if cur else [])


def _wrap(text: str, width: int | None, indent: str) -> list[str]:
    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [indent]


def is_numeric_cell(v: str) -> bool:
    """Right-align numbers, intervals, p-values and dashes; left-align names."""
    return bool(v) and (v[0].isdigit() or v[0] in "+-[<—")


def format_text(report: Report, wide: bool = False, width: int | None = None,
                color: bool | None = None) -> str:
    """The terminal report: the report's document (fusion_sweep.analysis.document) as text;
    every line fits `width` (default: terminal_width()), or with `wide` every table row on
    one line. color (default: use_color()): verdict words coloured."""
    width = terminal_width() if width is None else width
    color = use_color() if color is None else color
    return render_text(build_document(report), width, wide, color)


def render_text(blocks: list[Block], width: int, wide: bool = False,
                color: bool = False) -> str:
    """The blocks the terminal shows (narrow, or WIDE with `wide`), one paragraph each."""
    medium = WIDE if wide else NARROW
    shown = [b for b in blocks if medium in b.media]
    return "\n\n".join(paint(_text_block(b, width, wide), color and getattr(b, "painted", False))
                        for b in shown) + "\n"


def _text_block(block: Block, width: int, wide: bool) -> str:
    """One block as terminal text: wrapped to `width`; tables to `width` unless `wide`
    (then only their titles and notes wrap)."""
    if isinstance(block, Paragraph):
        return "\n".join(ln for part in block.text.split("\n") for ln in _wrap(part, width, ""))
    if isinstance(block, Bullets):
        lines = _wrap(block.lead, width, "") if block.lead else []
        return "\n".join(lines + [ln for item in block.items
                                  for ln in _wrap(block.mark + item, width, "  ")])
    if isinstance(block, TableBlock):
        table = block.table if wide or block.short is None else block.short
        if isinstance(table, str):
            return "\n".join(_wrap(table, width, ""))
        return layout(table, width=None if wide else width, notes_width=width)
    if isinstance(block, ClaimTests):
        return format_claims(block.claims, width, block.label)
    raise AssertionError(f"the terminal has no rendering of {type(block).__name__}")


def format_claims(rec: ClaimSetResult, width: int | None = None,
                  label: str | None = None) -> str:
    """The claims report: each claim's words beside its result, then every claim test.
    label: said in the header when the claim tests are descriptive (an adaptive sweep)."""
    head = f"CLAIMS · {rec.title} · {rec.paper}" + (f" ({label})" if label else "")
    out = ["\n".join(_wrap(head, width, "")
                     + _wrap(f"Holm over the family of m = {rec.family_size} claim tests "
                             f"(alpha = {rec.alpha}); TOST over "
                             f"{rec.tost_family_size}", width, ""))]
    for c in rec.claims:
        if c.n_tests:
            tally = (f"{c.n_supports} support, {c.n_contradicts} contradict, "
                     f"{c.n_undecided} undecided of {c.n_tests} trainings; "
                     f"{c.n_claim_tests} claim tests")
        elif c.missing:
            tally = "not run: " + "; ".join(c.missing)
        else:  # every training is outside what the claim can be tested on (order-only labels)
            tally = "no training counts; its claim tests below are descriptive"
        out.append("\n".join(
            _wrap(f"{c.claim} {c.title}: {c.support} ({tally})", width, "")
            + _wrap(f"paper ({c.where}): “{c.quote}”", width, "    ")
            + _wrap(f"tested as: {c.operationalisation}", width, "    ")))
    out.append(layout(claim_tests_table(rec, contrast=False), width=width))
    return "\n\n".join(out)


