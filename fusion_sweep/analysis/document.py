"""The report as one document: an ordered list of typed blocks, built once from a
:class:`fusion_sweep.analysis.report.Report` and rendered by the terminal
(:func:`fusion_sweep.analysis.text.render_text`) and the page renderers (Markdown and HTML,
:mod:`fusion_sweep.analysis.render`), so every format says the same things in the same order.

Each block names the media that show it (`media`): the terminal (`NARROW`, and `WIDE` for
`stats --wide`) and the page (`PAGE`, Markdown and HTML). A table may carry the shorter form
the narrow terminal shows (`TableBlock.short`). Figures are drawn only for the page: the
document says where each goes and what it shows (the `*Figures` blocks), the page writer draws
it, so the terminal never loads matplotlib.

The order, in every medium: where the results come from and with which settings, the answer
in words, the paper's claims (with --claims), the verdict grid (and the paper-style figure),
the rule that decides a verdict, the warnings, each arm, the sequential decisions (an adaptive
sweep), the comparisons per regime, across regimes, seeds needed and chance (page), the paper
tables (page), the dropped pairs, then the terminal's pointer to every column and its claim
tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from fusion_sweep.analysis.answer import findings
from fusion_sweep.analysis.claims import ClaimSetResult, ClaimTest
from fusion_sweep.analysis.estimands import VERDICT_RULE
from fusion_sweep.analysis.grid import grid_rows
from fusion_sweep.analysis.platforms import platform_line
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.regimes import lengths_known
from fusion_sweep.analysis.report import Report
from fusion_sweep.analysis.schema import DESCRIPTIVE_LABEL
from fusion_sweep.analysis.sections import DesignWarning, Source
from fusion_sweep.analysis.sequential import SequentialResult
from fusion_sweep.analysis.sequential_report import sequential_table
from fusion_sweep.analysis.tables import (
    Table, arms_table, blocks_by_regime, chance_table, claim_tests_table, claims_table,
    comparison_table, compact_grid_table, dropped_table, fusion_by_dataset_tables,
    grid_regimes, interaction_table, pe_by_fusion_tables, seeds_needed_table,
    short_comparison_table, variant_by_dataset_tables, verdict_grid_table,
)

# The media: the terminal (narrow, or every column with --wide) and the page (Markdown, HTML).
NARROW, WIDE, PAGE_MEDIUM = "narrow", "wide", "page"
TERMINAL = frozenset({NARROW, WIDE})
PAGE = frozenset({PAGE_MEDIUM})
EVERY = TERMINAL | PAGE

TITLE = "fusion-sweep stats: does the fusion operator beat seed noise?"
HINT = ("Every column (Wilcoxon, sign-flip, BCa, d_z, seeds needed, power at α): "
        "`--wide`, `--format json` or `--report DIR`.")


@dataclass(frozen=True)
class Heading:
    """A section heading (level 1 or 2); the terminal names its sections in its tables."""

    text: str
    level: int = 2
    media: frozenset = PAGE


@dataclass(frozen=True)
class Paragraph:
    """Text; the terminal wraps each of its lines, painted: verdict words coloured."""

    text: str
    media: frozenset = EVERY
    painted: bool = False


@dataclass(frozen=True)
class Bullets:
    """A list; on the terminal under its lead line, each item indented and marked."""

    items: tuple[str, ...]
    lead: str = ""
    mark: str = ""
    media: frozenset = EVERY
    painted: bool = False


@dataclass(frozen=True)
class TableBlock:
    """A table; `short`: what the narrow terminal shows instead (a shorter table, or one line
    when there is nothing to list), None: the table itself."""

    table: Table
    short: Table | str | None = None
    media: frozenset = EVERY
    painted: bool = False


@dataclass(frozen=True)
class GridBlock:
    """The verdict grid of one metric with each cell's verdict (None: no comparison), for
    the page's coloured cells."""

    table: Table
    verdicts: tuple[tuple[str | None, ...], ...]
    media: frozenset = PAGE


@dataclass(frozen=True)
class ClaimTests:
    """The terminal's closing section with --claims: each claim beside its words, then every
    claim test (label: said when the tests are descriptive)."""

    claims: ClaimSetResult
    label: str | None
    media: frozenset = TERMINAL


# Where the page's figures go (the page writer draws them: fusion_sweep.analysis.render).
@dataclass(frozen=True)
class ArmsFigures:
    """The paper-style figure per group: each arm's metric per regime, every seed a dot."""

    media: frozenset = PAGE


@dataclass(frozen=True)
class DeltaFigure:
    """The paired per-seed Δ plot of one regime's comparisons in one group."""

    metric: str
    group: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    media: frozenset = PAGE


@dataclass(frozen=True)
class ForestFigures:
    """The forest plot per (group, metric) across regimes (heading: its last word names
    what is crossed, 'regimes' or 'datasets')."""

    heading: str
    media: frozenset = PAGE


@dataclass(frozen=True)
class SequentialFigure:
    """The confidence sequences of an adaptive sweep's comparisons against seeds."""

    results: tuple[SequentialResult, ...]
    media: frozenset = PAGE


@dataclass(frozen=True)
class ClaimsFigures:
    """The claim tests' estimates with their intervals, one figure per kind."""

    tests: tuple[ClaimTest, ...]
    media: frozenset = PAGE


Block = Union[Heading, Paragraph, Bullets, TableBlock, GridBlock, ClaimTests, ArmsFigures,
              DeltaFigure, ForestFigures, SequentialFigure, ClaimsFigures]


def build_document(report: Report) -> list[Block]:
    """The report's document, in the order every medium shows it (module docstring)."""
    blocks = _provenance(report) + _answer(report) + _claims_glance(report)
    blocks += _glance(report) + [Paragraph(VERDICT_RULE)] + _warnings(report) + _arms(report)
    blocks += _sequential(report) + _comparisons(report) + _across(report)
    blocks += _page_tables(report) + _dropped(report) + [Paragraph(HINT, frozenset({NARROW}))]
    if report.claims is not None:
        blocks.append(ClaimTests(report.claims, descriptive_label(report)))
    return blocks


def _provenance(report: Report) -> list[Block]:
    """Which results, against which reference, with which settings."""
    s = report.settings
    page = (f"Source: {source_line(report.source)}. Baseline `{s.baseline}`, pairs: "
            f"{s.pairs}, alpha = {s.alpha}, equivalence margin = {s.margin_label()}, "
            f"BCa bootstrap {s.n_boot} resamples, rng seed {s.rng_seed}.")
    return [Paragraph(f"{header_line(report)}\n{settings_line(report)}", TERMINAL),
            Heading(TITLE, 1), Paragraph(page, PAGE)]


def _answer(report: Report) -> list[Block]:
    """The answer in words first: what the sentences measure, then one per finding."""
    answer = tuple(f.sentence for f in findings(report))
    out: list[Block] = []
    if report.comparisons:
        out.append(Bullets(answer, lead=f"The answer ({answer_scope(report)}):",
                           media=TERMINAL, painted=True))
    if answer:
        out += [Heading("The answer"), Paragraph(f"Measured: {answer_scope(report)}.", PAGE),
                Bullets(answer, media=PAGE)]
    return out


def _claims_glance(report: Report) -> list[Block]:
    """With --claims: each claim's verdict in one line (the terminal), or where the claims
    report is (the page, which writes it beside this one)."""
    rec = report.claims
    if rec is None:
        return []
    lines = []
    for c in rec.claims:
        if c.missing and not c.n_claim_tests:
            said = f"not testable here: {'; '.join(c.missing)}"
        else:
            said = (f"{c.support} ({c.n_supports} of {c.n_tests} trainings support, "
                    f"{c.n_contradicts} contradict)")
        lines.append(f"{c.claim} {c.title}: {said}.")
    return [Bullets(tuple(lines), lead=f"The paper's claims ({rec.title}; each quoted with its "
                                       "section below):", media=TERMINAL),
            Paragraph(f"The paper's claims ({rec.name}) are tested in `claims.html` / "
                      "`claims.md` beside this report.", PAGE)]


def _glance(report: Report) -> list[Block]:
    """The verdict grid: one compact table on the terminal, one per metric on the page with
    the paper-style figure below."""
    if not report.comparisons:
        return []
    out: list[Block] = [TableBlock(compact_grid_table(report), media=TERMINAL, painted=True),
                        Heading("The answer at a glance")]
    out += [GridBlock(verdict_grid_table(report, metric), _grid_verdicts(report, metric))
            for metric in report.settings.metrics
            if any(c.metric == metric for c in report.comparisons)]
    return out + [ArmsFigures()]


def _grid_verdicts(report: Report, metric: str) -> tuple[tuple[str | None, ...], ...]:
    """The verdict of every grid cell (None: no comparison there), for the cell colours."""
    regimes = grid_regimes(report)
    return tuple(tuple((row.cells[r.dataset].verdict if r.dataset in row.cells else None)
                       for r in regimes)
                 for row in grid_rows(report.comparisons, report.settings.axis)
                 if row.metric == metric)


def _warnings(report: Report) -> list[Block]:
    terminal = ([Bullets(tuple(warning_line(w) for w in report.warnings), lead="Warnings:",
                         mark="! ", media=TERMINAL)] if report.warnings else [])
    return terminal + [Heading("Design warnings"),
                       Bullets(tuple(warning_words(w) for w in report.warnings) or ("none",),
                               media=PAGE)]


def _arms(report: Report) -> list[Block]:
    if not report.arms:
        return []
    return [Heading("Each arm over its seeds"),
            TableBlock(arms_table(report), short=arms_table(report, short=True))]


def _sequential(report: Report) -> list[Block]:
    """An adaptive sweep's decisions: the sweep's verdicts, with the family they hold for."""
    seq = report.sequential
    if seq is None:
        return []
    title = (f"Sequential decisions (adaptive seeds, {seq.metric}) by the {seq.method} "
             f"CS: the verdicts of this sweep; m = {seq.m} comparisons fixed at launch "
             f"({seq.family_source})")
    return [TableBlock(sequential_table(seq.results, title), media=TERMINAL),
            *sequential_blocks(seq.results)]


def sequential_blocks(results: Sequence[SequentialResult]) -> list[Block]:
    """The page's sequential section: what the decisions are, their table and figure."""
    return [Heading("Adaptive seeds: sequential decisions"),
            Paragraph("Seeds were added only where a comparison was still undecided; these "
                      "decisions come from anytime-valid confidence sequences, valid at the "
                      f"data-dependent stopping time. Fixed-n tests below are "
                      f"{DESCRIPTIVE_LABEL}.", PAGE),
            TableBlock(sequential_table(results), media=PAGE),
            SequentialFigure(tuple(results))]


def _comparisons(report: Report) -> list[Block]:
    """Per regime and group: the comparison table (the terminal's short one shows its
    note under the last only) and the paired per-seed Δ plot."""
    out: list[Block] = [Heading("Comparisons per length regime")]
    regimes = blocks_by_regime(report)
    for k, (metric, regime, group, comps) in enumerate(regimes):
        short = descriptive(report, short_comparison_table(report, metric, regime, group, comps))
        if k < len(regimes) - 1:
            short = Table(short.title, short.headers, short.rows, [])
        out.append(TableBlock(descriptive(report, comparison_table(report, metric, regime,
                                                                   group, comps)),
                              short=short, painted=True))
        if comps:
            out.append(DeltaFigure(metric, group, tuple(comps)))
    return out


def _across(report: Report) -> list[Block]:
    """Across regimes: the forest plots, then the interaction tests (or why none ran)."""
    heading = "Across length regimes" if lengths_known(report.regimes) else "Across datasets"
    out: list[Block] = [Heading(heading), ForestFigures(heading)]
    if report.interaction.tests:
        return out + [TableBlock(descriptive(report, interaction_table(report)),
                                 short=descriptive(report, interaction_table(report, short=True)),
                                 painted=True)]
    return out + [Paragraph("Across datasets: the test needs one comparison in >= 2 datasets "
                            "with >= 2 pairs each", TERMINAL),
                  Paragraph("Interaction test not run: it needs a comparison present in at "
                            "least two datasets with at least two pairs each.", PAGE)]


def _page_tables(report: Report) -> list[Block]:
    """What only the page shows: seeds needed, chance, the paper-style tables."""
    out: list[Block] = [Heading("Seeds needed"),
                        TableBlock(descriptive(report, seeds_needed_table(report)), media=PAGE)]
    if report.chance.tests:
        out += [Heading("Chance level"),
                TableBlock(descriptive(report, chance_table(report)), media=PAGE)]
    out.append(Heading("Paper tables"))
    return out + [TableBlock(t, media=PAGE) for t in variant_by_dataset_tables(report)
                  + fusion_by_dataset_tables(report) + pe_by_fusion_tables(report)]


def _dropped(report: Report) -> list[Block]:
    return [Heading("Dropped pairs"),
            TableBlock(dropped_table(report),
                       short=None if report.dropped else "Dropped pairs: none")]


def build_claims_document(report: Report) -> list[Block]:
    """The claims document (the page's claims.md / claims.html): the claims beside their
    results, a figure, every claim test."""
    claims = report.claims
    assert claims is not None, "build_claims_document needs a report with --claims"
    out: list[Block] = [Heading(f"fusion-sweep claims: {claims.title}", 1)]
    if descriptive_label(report):
        out.append(Paragraph(f"Every claim test below is {descriptive_label(report)}: "
                             "fixed-n tests on a sweep whose seed count depended on the data.",
                             PAGE))
    out += [Paragraph(f"Paper: {claims.paper}. Source: {source_line(report.source)}. "
                      f"alpha = {claims.alpha}; Holm over the family of "
                      f"m = {claims.family_size} claim tests; TOST (equivalence margin "
                      f"{report.settings.margin_label()}) over {claims.tost_family_size}. "
                      "The comparison report is `report.html` beside this file.", PAGE),
            Paragraph(VERDICT_RULE, PAGE), Heading("Claims"),
            TableBlock(claims_table(claims), media=PAGE), Heading("Claim tests"),
            ClaimsFigures(claims.tests), TableBlock(claim_tests_table(claims), media=PAGE)]
    return out


# ----------------------------------------------------------------- the words blocks share
def answer_scope(report: Report) -> str:
    """What the answer's sentences measure, said once above them (terminal and report):
    'test_acc; 95% intervals; Holm p over m = 6 comparisons' [+ ' (descriptive label)']."""
    s = report.settings
    label = descriptive_label(report)
    return (f"{', '.join(s.metrics)}; {100 * (1 - s.alpha):g}% intervals; Holm p over m = "
            f"{report.family.m} comparisons" + (f" ({label})" if label else ""))


def header_line(report: Report) -> str:
    """The terminal's first line: which results, against which reference, at which α and m."""
    s, src = report.settings, report.source
    what = (f"sweep {src.sweep} ({src.n_runs} trial runs)" if src.is_mlflow
            else _where(src))
    return (f"fusion-sweep stats · {what} · baseline={s.baseline} · alpha={s.alpha} · "
            f"{family_line(report)}")


def settings_line(report: Report) -> str:
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


def warning_line(w: DesignWarning) -> str:
    """A warning as the terminal says it: a sentence, capitalised and ended (its code stays
    in the JSON and on stderr with --format json)."""
    msg = w.message.rstrip()
    path = "/" in msg.split(" ", 1)[0]  # it opens with a comparison's path: keep its case
    return (msg if path else f"{msg[:1].upper()}{msg[1:]}") + (
        "" if msg.endswith((".", "!", "?")) else ".")


def warning_words(w: DesignWarning) -> str:
    """A warning as the page says it: its sentence, capitalised, without the internal code
    (the code stays in stats.json and on stderr for scripts)."""
    msg = w.message
    return msg[:1].upper() + msg[1:]
