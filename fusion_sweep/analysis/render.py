"""`--report DIR`: report.md + report.html + figures (SVG, PDF, 300-dpi PNG) + stats.json,
from the report's document (fusion_sweep.analysis.document); with `--claims`, also claims.md +
claims.html (and their figures).

The document is built once, as the terminal shows it too; this module draws its figures and
renders its page blocks twice, so the Markdown and the HTML always say the same thing. The
HTML carries every figure inside itself (the SVG as a data URI), so it renders wherever it is
opened: from disk, zipped, or in MLflow's artifact viewer (which shows a page without the
files beside it); the Markdown links the PNGs.
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

from fusion_sweep.analysis import plots
from fusion_sweep.analysis.document import (
    PAGE_MEDIUM, ArmsFigures, Block, Bullets, ClaimsFigures, DeltaFigure, ForestFigures,
    GridBlock, Heading, Paragraph, SequentialFigure, TableBlock, build_claims_document,
    build_document, descriptive_label,
)
from fusion_sweep.analysis.document import sequential_blocks as sequential_section
from fusion_sweep.analysis.pairing import usable_values, variant_series
from fusion_sweep.analysis.variants import Axis, Variant
from fusion_sweep.analysis.report import Report
from fusion_sweep.analysis.schema import (
    INCONCLUSIVE, NOT_LEARNED, SUPPORT_COLORS, VERDICT_COLORS,
)
from fusion_sweep.analysis.sequential import SequentialResult, get_method
from fusion_sweep.analysis.tables import Table, grid_regimes, reference_first
from fusion_sweep.analysis.text import is_numeric_cell
from fusion_sweep.schema import metric_label, shown


@dataclass(frozen=True)
class Figure:
    """A drawn figure: `file` is the PNG the Markdown links; the HTML embeds its SVG sibling."""

    file: str
    alt: str


# What the page renders: the document's page blocks, its figures drawn.
PageBlock = Union[Heading, Paragraph, Bullets, TableBlock, GridBlock, Figure]


def write_report(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write every file of the report into out_dir (created); return name -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = draw_figures(report, build_document(report), out)
    files = {
        "markdown": _write(out / "report.md", render_markdown(page)),
        "html": _write(out / "report.html", render_html(page, "fusion-sweep stats", out)),
        "json": _write(out / "stats.json", report.to_json() + "\n"),
    }
    if report.claims is not None:
        claims = draw_figures(report, build_claims_document(report), out)
        files.update(claims_markdown=_write(out / "claims.md", render_markdown(claims)),
                     claims_html=_write(out / "claims.html",
                                        render_html(claims, "fusion-sweep claims", out)))
    files.update({p.name: p for fmt in plots.FIGURE_FORMATS
                  for p in sorted(out.glob(f"*.{fmt}"))})
    return files


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def draw_figures(report: Report, blocks: Sequence[Block], out: Path) -> list[PageBlock]:
    """The blocks the page shows, each figure drawn into `out` where the document puts it
    (a figure with nothing to show is left out)."""
    page: list[PageBlock] = []
    for blk in blocks:
        if PAGE_MEDIUM not in blk.media:
            continue
        draw = _DRAW.get(type(blk))
        page += draw(report, blk, out) if draw else [blk]
    return page


def group_words(axis: Axis, group: tuple[str, ...]) -> str:
    """What a group holds fixed, in words: 'sinusoidal positional encoding',
    'ressformer encoder, no positional encoding', '' (nothing)."""
    words = {"encoder": lambda v: f"{v} encoder",
             "pe": lambda v: "no positional encoding" if v == "none" else
             f"{v} positional encoding"}
    fixed = shown(dict(zip(axis.free, group)))
    return ", ".join(words.get(k, lambda v, k=k: f"{k} {v}")(v) for k, v in fixed.items())


def _titled(head: str, *parts: str) -> str:
    """'Head, part, part' with empty parts left out; the head capitalised."""
    text = ", ".join(p for p in (head, *parts) if p)
    return text[:1].upper() + text[1:]


def report_colors(report: Report) -> dict[str, str]:
    """One colour per arm for every figure of the report: by the fusion registry's order
    when the sweep logged it (the UI's colours), else by name."""
    axis = report.settings.axis
    arms = [axis.short(Variant(a.encoder, a.pe, a.fusion)) for a in report.arms]
    arms += [_arm_label(axis, c) for c in report.comparisons] + [c.baseline
                                                                 for c in report.comparisons]
    order = report.source.known_fusions or () if axis.is_fusion else ()
    return plots.arm_colors(arms, order)


def _arm_label(axis: Axis, c) -> str:
    return axis.short(Variant(c.encoder, c.pe, c.fusion))


def _arms_figures(report: Report, blk: ArmsFigures, out: Path) -> list[Figure]:
    """The paper-style figure per group: each arm's metric per regime, every seed a dot,
    each comparison's seed pairs joined, chance drawn (the first metric)."""
    axis, metric = report.settings.axis, report.settings.metrics[0]
    vals = usable_values(report.table, metric)
    if vals.empty:
        return []
    arms = list(variant_series(vals))
    vals = vals.assign(**{plots.ARM: [axis.short(v) for v in arms],
                          plots.GROUP: [axis.group(v) for v in arms]})
    regimes = [(r.dataset, r.label) for r in grid_regimes(report)]
    chance = {a.dataset: a.chance_level for a in report.arms
              if a.metric == metric and a.chance_level is not None}
    colors = report_colors(report)
    b: list[Figure] = []
    for group in sorted(set(vals[plots.GROUP])):
        sub = vals[vals[plots.GROUP] == group]
        ref = axis.short(axis.reference(group))
        pairs: dict[str, list[tuple[str, str]]] = {}
        for c in report.comparisons:
            if c.group == group and c.metric == metric:
                pairs.setdefault(c.dataset, []).append((_arm_label(axis, c), c.baseline))
        spec = plots.ArmsFigure(regimes, chance, reference_first(sub[plots.ARM], ref), pairs,
                                colors, reference=ref)
        parts = [p for p in axis.path(group).split("/") if p]
        name = plots.slug("arms", *parts, metric) + ".png"
        title = _titled(f"{metric_label(metric)} of each {axis.noun} per length regime",
                        group_words(axis, group))
        plots.arms_by_regime_plot(sub, spec, metric, title, out / name)
        b.append(Figure(name, f"{title}: every seed a dot, each comparison's seed pairs "
                              "joined, chance dashed"))
    return b


def _delta_figure(report: Report, blk: DeltaFigure, out: Path) -> list[Figure]:
    """The paired per-seed delta plot of one regime's comparisons in one group."""
    axis, comps = report.settings.axis, list(blk.comparisons)
    parts = [p for p in axis.path(blk.group).split("/") if p]
    name = plots.slug("deltas", comps[0].dataset, *parts, blk.metric) + ".png"
    title = _titled(f"per-seed difference in {metric_label(blk.metric)} from the "
                    f"reference, {comps[0].regime}", group_words(axis, blk.group))
    plots.paired_delta_plot(comps, title, comps[0].equivalence_margin, out / name, axis,
                            colors=report_colors(report))
    return [Figure(name, title)]


def _forest_figures(report: Report, blk: ForestFigures, out: Path) -> list[Figure]:
    """Forest plot per (group, metric) across regimes."""
    b: list[Figure] = []
    rank = {r.dataset: r.rank for r in report.regimes}
    axis, colors = report.settings.axis, report_colors(report)
    for group, metric in sorted({(c.group, c.metric) for c in report.comparisons}):
        comps = [c for c in report.comparisons if c.group == group and c.metric == metric]
        comps.sort(key=lambda c: (c.baseline, c.variant, rank[c.dataset]))
        parts = [p for p in axis.path(group).split("/") if p]
        name = plots.slug("forest", *parts, metric) + ".png"
        margins = {c.equivalence_margin for c in comps}  # one band only if one margin
        title = _titled(f"difference in {metric_label(metric)} from the reference across "
                        f"{blk.heading.split()[-1]}", group_words(axis, group),
                        descriptive_label(report) or "")
        plots.forest_plot(comps, title, margins.pop() if len(margins) == 1 else None,
                          out / name, axis, alpha=report.settings.alpha, colors=colors)
        b.append(Figure(name, f"{title}: mean difference with its 95% paired-t interval, "
                              "and each verdict with its Holm p and caveats"))
    return b


def _sequential_figure(report: Report | None, blk: SequentialFigure, out: Path,
                       name: str = "sequential_cs.png") -> list[Figure]:
    """The confidence sequences against seeds, written to out/name."""
    results = blk.results
    plots.cs_plot(results, out / name, "Confidence sequences against seeds "
                  "(shaded: running intersection; dashed: no difference"
                  + ("; band: ±margin)" if results and get_method(results[0].method)
                     .decides_equivalence else ")"))
    return [Figure(name, "confidence sequence of each comparison's "
                         f"{results[0].estimand if results else 'estimand'} against seeds")]


def _claims_figures(report: Report, blk: ClaimsFigures, out: Path) -> list[Figure]:
    """One figure per kind of claim test that has one to show."""
    return [Figure(name, f"claim tests: {kind}s with their intervals")
            for kind, name in (("difference", "claims_differences.png"),
                               ("ratio", "claims_ratios.png"),
                               ("probability", "claims_probabilities.png"))
            if plots.claims_plot(blk.tests, kind, out / name)]


# How the page draws each figure the document places: block type -> drawer.
_DRAW = {ArmsFigures: _arms_figures, DeltaFigure: _delta_figure,
         ForestFigures: _forest_figures, SequentialFigure: _sequential_figure,
         ClaimsFigures: _claims_figures}


def sequential_blocks(results: Sequence[SequentialResult], out_dir: str | Path,
                      name: str = "sequential_cs.png") -> list[PageBlock]:
    """The page's sequential section (fusion_sweep.analysis.document.sequential_blocks),
    its confidence-sequence figure drawn to out_dir/name."""
    *text, fig = sequential_section(results)
    return [*text, *_sequential_figure(None, fig, Path(out_dir), name)]


# --------------------------------------------------------------------------- markdown
def render_markdown(blocks: Sequence[PageBlock]) -> str:
    """The page blocks as Markdown; a table's title is its caption unless the heading just
    above says it."""
    out, heading = [], None
    for blk in blocks:
        if isinstance(blk, Heading):
            out.append("#" * blk.level + " " + blk.text)
        elif isinstance(blk, Paragraph):
            out.append(blk.text)
        elif isinstance(blk, Bullets):
            out.append("\n".join(f"- {_md_escape(i)}" for i in blk.items))
        elif isinstance(blk, (TableBlock, GridBlock)):
            out.append(_md_table(blk.table, caption=blk.table.title != heading))
        elif isinstance(blk, Figure):
            out.append(f"![{blk.alt}]({blk.file})")
        heading = blk.text if isinstance(blk, Heading) else None
    return "\n\n".join(out) + "\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def _md_table(t: Table, caption: bool = True) -> str:
    if not t.rows:
        return f"**{t.title}**: none" if caption else "none"
    lines = ([f"**{t.title}**", ""] if caption else []) + ["| " + " | ".join(map(_md_escape, t.headers)) + " |",
             "|" + "|".join("---" for _ in t.headers) + "|"]
    lines += ["| " + " | ".join(_md_escape(v) for v in r) + " |" for r in t.rows]
    lines += [""] + [f"_{_md_escape(f)}_  " for f in t.footnotes] if t.footnotes else []
    return "\n".join(lines)


# --------------------------------------------------------------------------- html
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1f2328;max-width:1560px}
p,ul{max-width:1100px}figure{margin:10px 0}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
h3{font-size:14px;margin:18px 0 6px}p,li{font-size:13px;line-height:1.45}
.tw{overflow-x:auto;margin:14px 0 4px}table{border-collapse:collapse;font-size:11.5px}
th,td{border:1px solid #d0d7de;padding:2px 5px;text-align:left}td:first-child{white-space:nowrap}
th{background:#f6f8fa;white-space:normal;vertical-align:bottom}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.w{white-space:normal;min-width:220px;max-width:460px}
.pin{position:sticky;background:#fff;box-shadow:-1px 0 0 #d0d7de}th.pin{background:#f6f8fa}
caption{caption-side:top;text-align:left;font-weight:600;font-size:13px;padding:4px 0}
.foot{font-size:11px;color:#57606a;margin:0 0 8px}img{max-width:100%;height:auto;border:1px solid #eaeef2}
#img-status{display:none}#img-status.bad{display:block;color:#cf222e;font-weight:600;font-size:13px}
table.grid{font-size:12.5px;margin-bottom:4px}table.grid td,table.grid th{padding:5px 9px;vertical-align:top}
table.grid td.g{white-space:normal;min-width:150px}td.g b{font-size:13px}td.g small{color:#424a53}
td.g small{font-weight:normal}
"""
# Marks the page with how many figures loaded (data-images-loaded="k/n") and how many tables
# are wider than the page (data-tables-overflowing="k", columns behind a scrollbar): a reader
# sees a red banner only for a broken figure, and headless-browser checks read the attributes.
_JS = """
var PINNED = ['learned?', 'verdict'];  // the headers a reader must always see
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-images-loaded', ok + '/' + imgs.length);
  // learned?, verdict and any column after them stay at the right edge of a table wider
  // than its pane (MLflow's artifact pane): sticky cells, each offset by those to its right
  document.querySelectorAll('table').forEach(function (t) {
    var head = Array.prototype.slice.call(t.querySelectorAll('thead th'));
    var first = head.findIndex(function (h) { return PINNED.indexOf(h.textContent) >= 0; });
    if (first < 0 || head.length - first > 4) return;
    var right = 0;
    for (var j = head.length - 1; j >= first; j--) {
      t.querySelectorAll('tr > :nth-child(' + (j + 1) + ')').forEach(function (c) {
        c.classList.add('pin'); c.style.right = right + 'px';
      });
      right += head[j].offsetWidth;
    }
  });
  var wide = Array.prototype.slice.call(document.querySelectorAll('.tw')).filter(
    function (d) { return d.scrollWidth > d.clientWidth + 1; }).length;
  document.body.setAttribute('data-tables-overflowing', String(wide));
  var el = document.getElementById('img-status');
  if (ok !== imgs.length) {  // shown only when a figure is missing
    el.textContent = (imgs.length - ok) + ' of ' + imgs.length + ' figures failed to load';
    el.className = 'bad';
  }
});
"""


def render_html(blocks: Sequence[PageBlock], title: str, out: Path | None = None) -> str:
    """The page; every figure embedded from `out` (its SVG, else its PNG, as a data URI)."""
    body, heading = [], None
    for blk in blocks:
        if isinstance(blk, Heading):
            body.append(f"<h{blk.level}>{_inline(blk.text)}</h{blk.level}>")
        elif isinstance(blk, Paragraph):
            body.append(f"<p>{_inline(blk.text)}</p>")
        elif isinstance(blk, Bullets):
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in blk.items) + "</ul>")
        elif isinstance(blk, TableBlock):
            body.append(_html_table(blk.table, caption=blk.table.title != heading))
        elif isinstance(blk, GridBlock):
            body.append(_html_grid(blk.table, blk.verdicts))
        elif isinstance(blk, Figure):
            body.append(f'<figure id="{html.escape(Path(blk.file).stem)}"><img '
                        f'src="{embedded(Path(out or "."), blk.file)}" '
                        f'alt="{html.escape(blk.alt)}"></figure>')
        heading = blk.text if isinstance(blk, Heading) else None
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}{_verdict_css()}</style>"
            f"<script>{_JS}</script></head>\n<body>\n<div id=\"img-status\"></div>\n"
            + "\n".join(body) + "\n</body></html>\n")


_MIME = {".svg": "image/svg+xml", ".png": "image/png"}


def embedded(out: Path, name: str) -> str:
    """A figure as a data URI: its SVG sibling (vector, small) when drawn, else the file."""
    path = out / name
    svg = path.with_suffix(".svg")
    path = svg if svg.exists() else path
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"data:{_MIME.get(path.suffix, 'application/octet-stream')};base64,{data}"


def _inline(s: str) -> str:
    """Escape, then render `code` spans."""
    parts = html.escape(s).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _verdict_css() -> str:
    """One colour rule per verdict, from the schema's VERDICT_COLORS (plots use the same),
    and per claim support state (SUPPORT_COLORS)."""
    weight = {INCONCLUSIVE: "normal", NOT_LEARNED: "600;font-style:italic"}
    verdicts = "".join(f".{verdict_class(v)}{{color:{c};font-weight:{weight.get(v, '600')}}}"
                       for v, c in VERDICT_COLORS.items())
    tints = "".join(f"td.g.{verdict_class(v)}{{background:{c}14}}"  # 8% of the colour
                    for v, c in VERDICT_COLORS.items())
    return verdicts + tints + "".join(f".{support_class(v)}{{color:{c};font-weight:600}}"
                                      for v, c in SUPPORT_COLORS.items())


def verdict_class(verdict: str) -> str:
    """CSS class of a verdict cell: 'not learned' -> 'v-not-learned' (one class, not two)."""
    return "v-" + verdict.replace(" ", "-")


def support_class(state: str) -> str:
    """CSS class of a claim-support cell: 'does not decide' -> 's-does-not-decide'."""
    return "s-" + state.lower().replace(" ", "-")


def _cell_class(header: str, value: str) -> str:
    # a verdict cell may carry its caveat after the verdict ('better [rests on normality]')
    verdict = next((v for v in VERDICT_COLORS if value == v or value.startswith(v + " ")), None)
    if header in VERDICT_HEADERS and verdict:
        return verdict_class(verdict)
    if header in SUPPORT_HEADERS and value in SUPPORT_COLORS:
        return support_class(value)
    if is_numeric_cell(value):
        return "n"
    return "w" if len(value) > WRAP_OVER else ""


# Text cells longer than this wrap (quotes, contrasts, drop details) instead of widening
# the table past the page.
WRAP_OVER = 60


VERDICT_HEADERS = ("verdict", "ratio verdict")
SUPPORT_HEADERS = ("paper's claim",)


def _html_grid(t: Table, verdicts: Sequence[Sequence[str | None]]) -> str:
    """The verdict grid: each cell's verdict as a bold coloured word on a tinted
    background, Δ beside it, its 95% interval, p_holm and the win rate below."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    rows = []
    for r, vs in zip(t.rows, verdicts):
        cells = [f"<th>{html.escape(r[0])}</th>"]
        for text, v in zip(r[1:], vs):
            if v is None:
                cells.append(f'<td class="g">{html.escape(text)}</td>')
                continue
            delta, detail = _split_cell(text, v)
            cells.append(f'<td class="g {verdict_class(v)}" data-verdict="{html.escape(v)}">'
                         f"<b>{html.escape(v)}</b> Δ {html.escape(delta)}<br>"
                         f"<small>{html.escape(detail)}</small></td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    foot = "".join(f'<p class="foot">{html.escape(f)}</p>' for f in t.footnotes)
    return (f'<div class="tw"><table class="grid" id="verdict-grid"><caption>'
            f"{html.escape(t.title)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>{foot}")


def _split_cell(text: str, verdict: str) -> tuple[str, str]:
    """'+0.0040 better [..] 99.4% · n=5' -> ('+0.0040', '[..] 99.4% · n=5')."""
    delta, _, rest = text.partition(" ")
    return delta, rest[len(verdict):].strip()


def _html_table(t: Table, caption: bool = True) -> str:
    """A table; caption=False when the heading just above already says its title. A table
    wider than its pane keeps learned? and verdict in view at its right edge (_JS)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    rows = []
    for r in t.rows:
        cells = []
        for h, v in zip(t.headers, r):
            cls = _cell_class(h, v)
            cells.append(f'<td class="{cls}">{html.escape(v)}</td>' if cls
                         else f"<td>{html.escape(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        rows = [f'<tr><td colspan="{len(t.headers)}">none</td></tr>']
    foot = "".join(f'<p class="foot">{html.escape(f)}</p>' for f in t.footnotes)
    cap = f"<caption>{html.escape(t.title)}</caption>" if caption else ""
    return (f'<div class="tw"><table>{cap}'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{foot}")
