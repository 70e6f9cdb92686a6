"""Plain-text terminal output: the answer in words first (fusion_sweep.analysis.answer),
then the verdict grid, warnings, one short table per regime (and the claims).

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

from fusion_sweep.analysis.answer import findings
from fusion_sweep.analysis.claims import ClaimSetResult
from fusion_sweep.analysis.estimands import VERDICT_RULE
from fusion_sweep.analysis.platforms import platform_line
from fusion_sweep.analysis.report import Report
from fusion_sweep.analysis.sections import DesignWarning, Source
from fusion_sweep.analysis.sequential_report import sequential_table
from fusion_sweep.analysis.tables import (
    Table, arms_table, blocks_by_regime, claim_tests_table, comparison_table, compact_grid_table,
    dropped_table, interaction_table, short_comparison_table,
)

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


def warning_line(w: DesignWarning) -> str:
    """A warning as a reader meets it: a sentence, capitalised and ended (its code stays in
    the JSON and on stderr with --format json)."""
    msg = w.message.rstrip()
    path = "/" in msg.split(" ", 1)[0]  # it opens with a comparison's path: keep its case
    return (msg if path else f"{msg[:1].upper()}{msg[1:]}") + (
        "" if msg.endswith((".", "!", "?")) else ".")


def is_numeric_cell(v: str) -> bool:
    """Right-align numbers, intervals, p-values and dashes; left-align names."""
    return bool(v) and (v[0].isdigit() or v[0] in "+-[<—")


def format_text(report: Report, wide: bool = False, width: int | None = None,
                color: bool | None = None) -> str:
    """The terminal report: the answer in words, then the tables; every line fits `width`
    (default: terminal_width()), or with `wide` every table row on one line. color (default:
    use_color()): verdict words coloured."""
    width = terminal_width() if width is None else width
    color = use_color() if color is None else color
    tw = None if wide else width  # tables' width
    parts = [_header(report, width)]
    if report.comparisons:
        parts.append(paint(answer_text(report, width), color))
    if report.claims is not None:  # the paper's claims right after the answer
        parts.append(claims_glance(report.claims, width))
    if report.comparisons:
        parts.append(paint(layout(compact_grid_table(report), width=tw, notes_width=width),
                           color))
    if report.warnings:
        parts.append("Warnings:\n" + "\n".join(
            ln for w in report.warnings for ln in _wrap(f"! {warning_line(w)}", width, "  ")))
    if report.arms:
        parts.append(layout(arms_table(report, short=not wide), width=tw, notes_width=width))
    if report.sequential is not None:
        seq = report.sequential
        parts.append(layout(sequential_table(
            seq.results,
            f"Sequential decisions (adaptive seeds, {seq.metric}) by the {seq.method} "
            f"CS: the verdicts of this sweep; m = {seq.m} comparisons fixed at launch "
            f"({seq.family_source})"),
            width=tw, notes_width=width))
    table = comparison_table if wide else short_comparison_table
    blocks = blocks_by_regime(report)
    for k, (metric, regime, group, comps) in enumerate(blocks):
        t = descriptive(report, table(report, metric, regime, group, comps))
        if not wide and k < len(blocks) - 1:  # the short tables' one note: under the last
            t = Table(t.title, t.headers, t.rows, [])
        parts.append(paint(layout(t, width=tw, notes_width=width), color))
    if report.interaction.tests:
        parts.append(paint(layout(descriptive(report, interaction_table(report, short=not wide)),
                                  width=tw, notes_width=width), color))
    else:
        parts.append("\n".join(_wrap("Across datasets: the test needs one comparison in >= 2 "
                                      "datasets with >= 2 pairs each", width, "")))
    parts.append(layout(dropped_table(report), width=tw, notes_width=width)
                 if report.dropped or wide else "Dropped pairs: none")
    parts.append("\n".join(_wrap(_settings_line(report), width, "")))
    parts.append("\n".join(_wrap(VERDICT_RULE, width, "")))
    if not wide:
        parts.append("\n".join(_wrap(
            "Every column (Wilcoxon, sign-flip, BCa, d_z, seeds needed, power at α): "
            "`--wide`, `--format json` or `--report DIR`.", width, "")))
    if report.claims is not None:
        parts.append(format_claims(report.claims, width, descriptive_label(report)))
    return "\n\n".join(parts) + "\n"


def answer_scope(report: Report) -> str:
    """What the answer's sentences measure, said once above them (terminal and report):
    'test_acc; 95% intervals; Holm p over m = 6 comparisons' [+ ' (descriptive label)']."""
    s = report.settings
    label = descriptive_label(report)
    return (f"{', '.join(s.metrics)}; {100 * (1 - s.alpha):g}% intervals; Holm p over m = "
            f"{report.family.m} comparisons" + (f" ({label})" if label else ""))


def answer_text(report: Report, width: int) -> str:
    """The answer: a heading naming what the sentences measure, then one wrapped sentence per
    finding, the summary last."""
    out = _wrap(f"The answer ({answer_scope(report)}):", width, "")
    for f in findings(report):
        out += textwrap.wrap(f.sentence, width, initial_indent="  ", subsequent_indent="    ",
                             break_on_hyphens=False)
    return "\n".join(out)


def claims_glance(rec: ClaimSetResult, width: int) -> str:
    """Each claim's verdict in one line, right after the answer: its id, title, what the
    sweep says of it and by which estimand; a claim the sweep cannot test says what it would
    need. The claim tests themselves come last (format_claims)."""
    out = _wrap(f"The paper's claims ({rec.title}; each quoted with its section below):",
                width, "")
    for c in rec.claims:
        if c.missing and not c.n_claim_tests:
            said = f"not testable here: {'; '.join(c.missing)}"
        else:
            said = (f"{c.support} ({c.n_supports} of {c.n_tests} trainings support, "
                    f"{c.n_contradicts} contradict)")
        out += textwrap.wrap(f"{c.claim} {c.title}: {said}.", width, initial_indent="  ",
                             subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join(out)


def _header(report: Report, width: int) -> str:
    """The first line: which results, against which reference, at which α and m."""
    s, src = report.settings, report.source
    what = (f"sweep {src.sweep} ({src.n_runs} trial runs)" if src.is_mlflow
            else _where(src))
    return "\n".join(_wrap(f"fusion-sweep stats · {what} · baseline={s.baseline} · "
                           f"alpha={s.alpha} · {family_line(report)}", width, ""))


def _settings_line(report: Report) -> str:
    s = report.settings
    return (f"Source: {source_line(report.source)} · margin={s.margin_label()} · "
            f"bootstrap={s.n_boot} · rng-seed={s.rng_seed}")


def descriptive(report: Report, table: Table) -> Table:
    """An adaptive sweep's fixed-n table, labelled as descriptive (its seed count depended
    on the data, so its p-values and verdicts are not valid tests)."""
    label = descriptive_label(report)
    if label is None:
        return table
    return Table(f"{table.title} ({label})", table.headers, table.rows, table.footnotes)


def descriptive_label(report: Report) -> str | None:
    """The adaptive sweep's label of every fixed-n output, or None for a fixed-seed sweep."""
    if report.sequential is None:
        return None
    return report.sequential.fixed_n_label


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


def family_line(report: Report) -> str:
    """'m=6, fixed by the sweep' / 'm=6, every comparison in FILE': the fixed-n Holm family."""
    return f"m={report.family.m}, {report.family.source}"


def source_line(src: Source) -> str:
    """Where the results come from, and the platform(s) they ran on when recorded."""
    where = platform_line(src.platforms or [])
    where = f", {where}" if where else ""
    if src.is_mlflow:
        return (f"MLflow {src.tracking_uri} experiment={src.experiment} "
                f"sweep={src.sweep} ({src.n_runs} trial runs){where}")
    return _where(src) + where


def _where(src: Source) -> str:
    """A results file's path, else the kind of input ('table')."""
    return str(src.path) if src.path is not None else src.kind
