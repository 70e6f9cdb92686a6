"""Report tables as (title, headers, rows) of strings, shared by terminal/Markdown/HTML.

A :class:`Table` is format-neutral; :mod:`fusion_sweep.analysis.text` and :mod:`fusion_sweep.analysis.render` lay it
out. Numbers are formatted once, here.

Variants: a comparison table belongs to one group (its title names the group's fields,
e.g. "pe=sinusoidal" or "encoder=ressformer · pe=none"), and names each arm by the fields
the baseline fixes (the fusion, or the full "encoder/pe/fusion" label), so no label is
ambiguous. Tables listing arms show an `encoder` column whenever the data holds an encoder
other than the standard one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fusion_sweep.analysis.chance import METHOD as CHANCE_METHOD
from fusion_sweep.analysis.claims import ClaimSetResult, ClaimTest
from fusion_sweep.analysis.estimands import MEAN_DELTA, WIN_RATE, labelled
from fusion_sweep.analysis import caveats as caveats_
from fusion_sweep.analysis.grid import GridRow, grid_rows, not_learned_mark, unlearned
from fusion_sweep.analysis.regimes import INTERACTION_VERDICT_RULE, lengths_known
from fusion_sweep.analysis.pairing import usable_values
from fusion_sweep.analysis.records import ChanceTest, Comparison, InteractionTest
from fusion_sweep.analysis.report import Report
from fusion_sweep.analysis.schema import COST_METRICS, DEFAULT_ENCODER, INCONCLUSIVE
from fusion_sweep.analysis.variants import Variant

DASH = "—"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    footnotes: list[str] = field(default_factory=list)


def fnum(x: object, digits: int = 4, signed: bool = False) -> str:
    """Fixed decimals; a dash for None/nan."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fp(p: object) -> str:
    """p-value: 3 significant digits, '<1e-6' below that."""
    if p is None or not math.isfinite(float(p)):
        return DASH
    return "<1e-6" if p < 1e-6 else f"{p:.3g}"


def fci(low: object, high: object, digits: int = 4) -> str:
    if low is None or not math.isfinite(float(low)):
        return DASH
    return f"[{low:+.{digits}f}, {high:+.{digits}f}]"


def arm_of(c: Comparison) -> Variant:
    """The arm variant of a comparison."""
    return Variant(c.encoder, c.pe, c.fusion)


def test_arm(t: InteractionTest) -> Variant:
    """The arm variant of an interaction test (INTERACTION_TEST_KEYS)."""
    return Variant(t.encoder, t.pe, t.fusion)


def show_encoder(report: Report) -> bool:
    """Whether tables need an encoder column: the data holds a non-standard encoder."""
    return bool((report.table["encoder"] != DEFAULT_ENCODER).any())


def arm_columns(report: Report) -> list[str]:
    """The variant fields a table of arms shows besides the fusion: (encoder,) pe."""
    return ["encoder", "pe"] if show_encoder(report) else ["pe"]


def group_columns(report: Report) -> list[str]:
    """The group fields (those the baseline leaves open) a table shows as columns."""
    free = report.settings.axis.free
    return [f for f in free if f != "encoder" or show_encoder(report)]


def blocks_by_regime(report: Report) -> list[tuple[str, str, tuple, list[Comparison]]]:
    """(metric, regime label, group, comparisons) in metric, short->long regime, group order.

    group: the values of the variant fields the baseline leaves open (() for a full label).
    """
    out = []
    for metric in report.settings.metrics:
        for r in report.regimes:
            groups = sorted({c.group for c in report.comparisons
                             if c.dataset == r.dataset and c.metric == metric})
            for group in groups:
                comps = [c for c in report.comparisons if c.dataset == r.dataset
                         and c.group == group and c.metric == metric]
                out.append((metric, r.label, group, comps))
    return out


# ----------------------------------------------------------------------------- verdict grid
def grid_regimes(report: Report) -> list:
    """The regimes (short -> long) that hold at least one comparison."""
    present = {c.dataset for c in report.comparisons}
    return [r for r in report.regimes if r.dataset in present]


def fpct(level: object) -> str:
    """A confidence level as a percentage: 0.95 -> '95%', 0.99722 -> '99.7%'."""
    if level is None or not math.isfinite(float(level)):
        return DASH
    return f"{100 * level:.3g}%"


def level_of(report: Report) -> str:
    """The one interval level every table shows: '95%' (1 - alpha)."""
    return fpct(1 - report.settings.alpha)


def caveats(c: Comparison) -> list[str]:
    """What qualifies a verdict, in a few words each (the answer's sentences say them in
    full): 'reference not learned', 'rests on normality', 'with all 6 pairs: better', ..."""
    out = [caveats_.short(f, unlearned(c)) for f in c.verdict_flags]
    mark = not_learned_mark(c)
    if mark and mark != c.verdict and not any(mark in x for x in out):
        out.append(mark)
    return list(dict.fromkeys(out))


def grid_cell(c: Comparison | None, digits: int = 4) -> tuple[str, str]:
    """(headline, detail) of one grid cell: ('+0.0040 better', '[+0.0010, +0.0070] ·
    p_holm 0.0021 · n=5 · win rate 5/5: inconclusive (win rate)'), every caveat in words.
    The interval is the paired-t interval at the report's one level (1 - alpha)."""
    if c is None:
        return DASH, ""
    head = f"{fnum(c.mean_delta, digits, signed=True)} {labelled(c.verdict, MEAN_DELTA)}"
    ci = fci(c.t_ci_low, c.t_ci_high, digits)
    detail = (f"{ci} · p_holm {fp(c.p_holm)} · n={c.n}" if ci != DASH else f"n={c.n}")
    detail += "".join(f" · {f}" for f in caveats(c)) + f" · {win_text(c)}"
    detail += "".join(f" · {e.cell}" for e in c.estimates)  # fusion_sweep.analysis.fixed
    return head, detail


def favourable(c: Comparison) -> int:
    """The seeds on which the arm is better (Δ > 0, or Δ < 0 for a lower-is-better metric)."""
    return c.wins if c.higher_is_better else c.losses


def win_text(c: Comparison) -> str:
    """'win rate 5/5: inconclusive' (ties said): the seeds on which the arm is better out of
    those not tied, and the exact sign test's verdict."""
    return (f"win rate {favourable(c)}/{c.wins + c.losses}"
            + (f" ({c.ties} ties)" if c.ties else "") + f": {c.win_verdict}")


def grid_footnotes(report: Report, comps: list[Comparison] | None = None) -> list[str]:
    """The grid's legend: the interval convention stated once, then each caveat present."""
    a, m = report.settings.alpha, report.family.m
    comps = report.comparisons if comps is None else comps
    out = [f"each cell: mean paired Δ (arm − reference) and its mean-Δ verdict (paired t, "
           f"assumes approximately normal Δ); its {level_of(report)} paired-t interval (one "
           f"level for every cell and table); p_holm: the paired-t p, Holm-adjusted over the "
           f"report's m = {m} comparisons: better/worse when p_holm < α = {a}; win rate k/n: "
           "the seeds on which the arm is better, and the exact sign test's verdict (Holm, "
           "distribution-free); regimes short → long by median length"]
    words = {w for c in comps for w in caveats(c)}
    if any("not learned" in w for w in words):
        out.append("'arm/reference not learned': that arm did not beat chance (the test "
                   "split's majority rate; 1/K when none is recorded), which withholds "
                   "equivalent (better and worse stand: the other arm learned); 'not "
                   "learned': neither arm did")
    if "withheld: chance unknown" in words:
        out.append("'chance unknown': whether an arm beats chance is unknown (class count "
                   "unknown, or one accuracy on every seed), which withholds the verdict")
    if "rests on normality" in words:
        out.append("'rests on normality': the mean-Δ verdict needs normal deltas (too few "
                   "pairs, or an arm at chance on some seeds); read the win rate beside it")
    return out


def verdict_grid_table(report: Report, metric: str | None = None) -> Table:
    """The grid as one table (Markdown, and the layout the HTML colours): a row per
    comparison, a column per regime, every cell '**verdict** Δ [CI] · p_holm · n'."""
    regimes = grid_regimes(report)
    rows = []
    for row in _grid_rows(report, metric):
        cells = []
        for r in regimes:
            c = row.cells.get(r.dataset)
            head, detail = grid_cell(c)
            cells.append(head if c is None else f"{head} {detail}")
        rows.append([_row_label(report, row)] + cells)
    return Table("Verdict grid: does each variant beat its reference, per length regime?",
                 ["comparison"] + [r.label for r in regimes], rows, grid_footnotes(report))


def terminal_cell(c: Comparison | None, level: str, show_n: bool = True) -> str:
    """A terminal grid cell, one fact a line: the mean-Δ verdict, its interval, p_holm (and
    n), the win rate and its verdict, then each caveat in words."""
    if c is None:
        return DASH
    lines = [f"mean Δ {fnum(c.mean_delta, 3, signed=True)}: {c.verdict}"]
    ci = fci(c.t_ci_low, c.t_ci_high, 3)
    lines += [f"{level} {ci}"] if ci != DASH else []
    lines += [f"p_holm {fp(c.p_holm)}" + (f" · n={c.n}" if show_n else ""), win_text(c),
              *(e.cell for e in c.estimates), *caveats(c)]
    return "\n".join(lines)


def compact_grid_table(report: Report) -> Table:
    """The terminal's grid: a comparison per row (its group on a second line), a regime per
    column headed by the dataset and its median length, every cell a few short lines."""
    regimes = grid_regimes(report)
    headers = ["comparison"] + [_short_regime(r) for r in regimes]
    grid = _grid_rows(report, None)
    refs = {c.baseline for row in grid for c in row.cells.values()}
    one_ref = len(refs) == 1  # then "vs REF" goes into the title, not into every row
    level = level_of(report)
    ns = {c.n for row in grid for c in row.cells.values()}
    groups = {_row_label(report, row).partition(", ")[2] for row in grid}
    rows = []
    for row in grid:
        pair, _, group = _row_label(report, row).partition(", ")  # group on the 2nd line
        if one_ref:
            pair = pair.rsplit(" vs ", 1)[0]
        group = group if len(groups) > 1 else ""
        rows.append(["\n".join(p for p in (pair, group) if p)]
                    + [terminal_cell(row.cells.get(r.dataset), level, len(ns) > 1)
                       for r in regimes])
    said = [f"vs {refs.pop()}" if one_ref else "", groups.pop() if len(groups) == 1 else "",
            f"n = {ns.pop()} pairs each" if len(ns) == 1 else ""]
    title = "Verdict grid" + (f" ({', '.join(p for p in said if p)})" if any(said) else "")
    return Table(title, headers, rows, grid_footnotes(report))


def _grid_rows(report: Report, metric: str | None) -> list[GridRow]:
    rows = grid_rows(report.comparisons, report.settings.axis)
    return [r for r in rows if metric is None or r.metric == metric]


def _row_label(report: Report, row: GridRow) -> str:
    return row.label + (f" ({row.metric})" if len(report.settings.metrics) > 1 else "")


def _short_regime(r: object) -> str:
    """'synthetic-short (48 tok)' (the dataset alone when its length is unknown)."""
    med = getattr(r, "median_tokens", float("nan"))
    return f"{r.dataset} ({med:.0f} tok)" if math.isfinite(med) else r.dataset


def short_comparison_table(report: Report, metric: str, regime: str, group: tuple,
                           comps: list[Comparison]) -> Table:
    """The terminal's default per-regime table: what decides the verdict, nothing more
    (`--wide`: comparison_table, every column)."""
    axis = report.settings.axis
    direction = "higher is better" if comps and comps[0].higher_is_better else "lower is better"
    refs = {c.baseline for c in comps}
    one_ref = len(refs) == 1  # then the reference goes into the title, not a column
    headers = [axis.noun, *([] if one_ref else ["vs"]), "n", "mean Δ",
               f"{level_of(report)} CI", "p_holm", "p_tost_holm", "power at\nα/m", "verdict"]
    rows = [[axis.short(arm_of(c)), *([] if one_ref else [c.baseline]), str(c.n),
             fnum(c.mean_delta, 3, signed=True), fci(c.t_ci_low, c.t_ci_high, 3),
             fp(c.p_holm), fp(c.tost_p_holm), fnum(c.power_at_holm_alpha, 2),
             short_verdict_cell(c)] for c in comps]
    vs = f"vs {refs.pop()}" if one_ref else ""
    title = " · ".join(p for p in (regime, axis.title(group), vs, f"{metric} ({direction})") if p)
    return Table(title, headers, rows, [power_footnote(comps, report.settings.alpha)])


def short_verdict_cell(c: Comparison) -> str:
    """'better', 'inconclusive (withheld: reference not learned)': the verdict and its
    caveats in words."""
    words = caveats(c)
    return c.verdict + (f" ({'; '.join(words)})" if words else "")


def learned_footnote(comps: list[Comparison], noun: str) -> str:
    """The legend of a `learned?` column, where it appears."""
    chance = fnum(comps[0].chance_level, 3) if comps else DASH
    return (f"learned?: does the {noun} / the reference beat chance ({chance} here: the test "
            "split's majority rate, 1/K when none is recorded; the exact per-seed test, "
            "learned on most seeds, else a Holm-adjusted t-test over seeds); 'no' on both "
            "sides: not learned; on one side: no equivalent; n/a: no chance level")


def power_footnote(comps: list[Comparison], alpha: float) -> str:
    am = fnum(comps[0].holm_first_step_alpha, 4) if comps else DASH
    return (f"power at α/m: post hoc, at the observed d_z and at α/m = {am} (Holm's first "
            f"step, the threshold the verdict needs); power at α = {alpha}: `--wide` / JSON "
            "(`power`)")


def comparison_table(report: Report, metric: str, regime: str, group: tuple,
                     comps: list[Comparison]) -> Table:
    """One regime's comparisons (the terminal's main table)."""
    axis = report.settings.axis
    level = f"{100 * (1 - report.settings.alpha):.0f}%"
    direction = "higher is better" if comps and comps[0].higher_is_better else "lower is better"
    headers = [axis.noun, "vs", "n", "mean Δ", "sd Δ", f"{level} CI", "p_t", "p_holm",
               "p_wilcoxon", "p_signflip", f"BCa {level} CI", "d_z", "k+/n", "power at α/m",
               "power at α", "seeds@80% (α/m)", "seeds@80% (α)", "p_tost_holm", "learned?",
               "verdict", "win rate"]
    cost = metric in COST_METRICS
    if cost:
        headers += ["ratio", f"{level} ratio CI", "p_ratio_holm", "ratio verdict"]
    rows, notes = [], []
    for c in comps:
        if c.wilcoxon_method not in notes:
            notes.append(c.wilcoxon_method)
        boot = fci(c.boot_ci_low, c.boot_ci_high)
        rows.append([axis.short(arm_of(c)), c.baseline, str(c.n),
                     fnum(c.mean_delta, signed=True),
                     fnum(c.sd_delta), fci(c.t_ci_low, c.t_ci_high), fp(c.t_p),
                     fp(c.p_holm), fp(c.wilcoxon_p), fp(c.signflip_p),
                     boot + (" (descriptive)" if c.boot_descriptive and boot != DASH else ""),
                     fnum(c.dz, 2, signed=True), f"{c.n_positive}/{c.n}",
                     fnum(c.power_at_holm_alpha, 2), fnum(c.power, 2),
                     _seeds(c.seeds_for_80_power_at_holm_alpha),
                     _seeds(c.seeds_for_80_power), fp(c.tost_p_holm), learned_cell(c),
                     verdict_cell(c), win_text(c)] + (ratio_cells(c) if cost else []))
    foot = [f"{level} CI: the paired-t interval (one level everywhere); better/worse when "
            f"p_holm < α = {report.settings.alpha}",
            f"p_wilcoxon: {'; '.join(notes)}" if notes else ""]
    if any(c.boot_descriptive for c in comps):
        foot.append("BCa (descriptive): fewer than 10 pairs, the bootstrap undercovers")
    foot.append("power and seeds@80%: post hoc, at the observed d_z; at α/m = "
                f"{fnum(comps[0].holm_first_step_alpha, 4) if comps else DASH} (Holm's "
                f"first step, what the verdict needs; JSON `power_at_holm_alpha`) and at "
                f"α = {report.settings.alpha} (unadjusted; JSON `power`)")
    margin = comps[0].equivalence_margin if comps else None
    if margin is not None:
        foot.append(f"equivalence margin ±{margin:g} ({metric} units), TOST, Holm across the "
                    "report's TOST tests")
    if any(c.learned != "n/a" for c in comps):
        foot.append(learned_footnote(comps, axis.noun))
    if cost:
        foot.append(f"ratio: geometric mean of {axis.noun}/reference over the paired seeds; "
                    f"{level} t-interval of the mean log ratio, exponentiated; p_ratio_holm: "
                    "Holm over the report's ratio tests; a ratio equal on every seed is exact "
                    "(no seed noise) and decides the ratio verdict by itself")
    title = " · ".join(p for p in (regime, axis.title(group), f"{metric} ({direction})") if p)
    return Table(title, headers, rows, [f for f in foot if f])


def fratio(x: object) -> str:
    """A ratio: 4 significant digits and a ×, a dash for None/nan."""
    if x is None or not math.isfinite(float(x)):
        return DASH
    return f"{x:.4g}×"


def verdict_cell(c: Comparison) -> str:
    """The verdict with every flag that qualifies it in full beside it: 'better [rests on
    normality (n = 2 < 5)]' (the report's tables; the terminal's: short_verdict_cell)."""
    flags = [caveats_.full(f) for f in c.verdict_flags]
    return c.verdict + (f" [{'; '.join(flags)}]" if flags else "")


def ratio_cells(c: Comparison) -> list[str]:
    """ratio, ratio CI, Holm p, verdict of a cost comparison."""
    ci = (DASH if c.ratio_ci_low is None or not math.isfinite(c.ratio_ci_low)
          else f"[{c.ratio_ci_low:.4g}, {c.ratio_ci_high:.4g}]")
    return [fratio(c.ratio), ci, fp(c.ratio_p_holm), c.ratio_verdict or DASH]


def learned_cell(c: Comparison) -> str:
    """'yes/no': does the fusion / the reference beat chance ('n/a' without a chance level)."""
    if c.learned == "n/a":
        return "n/a"
    return f"{c.learned}/{c.baseline_learned}"


def _seeds(v: object) -> str:
    return DASH if v is None else str(v)


def interaction_table(report: Report, short: bool = False) -> Table:
    """The across-regime tests; short (the terminal): the contrast, its interval, Holm p
    and the verdict, without the dataset list and the Welch statistics."""
    if short:
        return _short_interaction_table(report)
    tests = report.interaction.tests
    level = f"{100 * (1 - report.settings.alpha):.0f}%"
    # Without median_tokens the order is by name: never claim short/long then.
    by_length = lengths_known(report.regimes)
    order = "datasets (short→long)" if by_length else "datasets (by name; lengths unknown)"
    axis, cols = report.settings.axis, group_columns(report)
    headers = [axis.noun, "vs", *cols, "metric", order, "n", "Welch F (df)", "p", "p_holm",
               "contrast", "Δ difference", f"{level} Welch CI", "p_diff", "verdict"]
    rows = []
    for t in tests:
        df = (f"{fnum(t.welch_f, 2)} ({fnum(t.df_num, 0)}, {fnum(t.df_denom, 1)})"
              if t.welch_f is not None and math.isfinite(t.welch_f) else DASH)
        rows.append([axis.short(test_arm(t)), t.baseline, *(getattr(t, f) for f in cols), t.metric,
                     (" < " if by_length else ", ").join(t.datasets),
                     "/".join(map(str, t.n_per_dataset)), df, fp(t.welch_p),
                     fp(t.p_holm), f"Δ {t.long_dataset} − Δ {t.short_dataset}",
                     fnum(t.diff_in_deltas, signed=True),
                     fci(t.diff_ci_low, t.diff_ci_high), fp(t.diff_p),
                     t.verdict])
    return Table(f"Does the {axis.noun} effect differ across these datasets?", headers, rows,
                 [report.interaction.method, INTERACTION_VERDICT_RULE])


def _short_interaction_table(report: Report) -> Table:
    level = level_of(report)
    axis, cols = report.settings.axis, group_columns(report)
    tests = report.interaction.tests
    headers = [axis.noun, "vs", *cols, "metric", "n", "p_holm", "Δ difference",
               f"{level} Welch CI", "verdict"]
    rows = [[axis.short(test_arm(t)), t.baseline, *(getattr(t, f) for f in cols), t.metric,
             "/".join(map(str, t.n_per_dataset)), fp(t.p_holm),
             fnum(t.diff_in_deltas, signed=True), fci(t.diff_ci_low, t.diff_ci_high),
             t.verdict] for t in tests]
    title, headers, rows = constant_columns(
        f"Does the {axis.noun} effect differ across these datasets?", headers, rows,
        ["vs", *cols, "metric"])
    known = lengths_known(report.regimes)
    order = ("datasets short → long: " if known else "datasets (by name; lengths unknown): ")
    contrasts = sorted({f"Δ {t.long_dataset} − Δ {t.short_dataset}" for t in tests})
    return Table(title, headers, rows,
                 [order + (" < " if known else ", ").join(tests[0].datasets if tests else [])
                  + "; p_holm: Welch one-way ANOVA of the per-seed deltas, Holm across tests; "
                  f"Δ difference: {'; '.join(contrasts)}, with its Welch t-interval (`--wide`: "
                  "every column)", INTERACTION_VERDICT_RULE])


def dropped_table(report: Report) -> Table:
    cols = arm_columns(report)
    headers = ["dataset", *cols, "metric", "fusion", "vs", "seed", "reason", "detail"]
    rows = [[d.dataset, *(getattr(d, f) for f in cols), d.metric or DASH, d.fusion,
             d.baseline or DASH, str(d.seed), d.reason, d.detail]
            for d in report.dropped]
    return Table(f"Dropped pairs ({len(rows)})", headers, rows,
                 [] if report.settings.axis.is_fusion else
                 ["vs: the reference variant (encoder/pe/fusion)"])


def seeds_needed_table(report: Report) -> Table:
    """Per comparison: observed d_z, post hoc power and seeds for 80% power, at alpha/m
    (Holm's first step: what the verdict applies) and at unadjusted alpha."""
    a = report.settings.alpha
    am = report.comparisons[0].holm_first_step_alpha if report.comparisons else a
    cols = arm_columns(report)
    headers = ["dataset", *cols, "metric", "fusion", "vs", "n", "d_z",
               "power at α/m", f"seeds for 80% (α/m = {am:.3g})", "power at α",
               f"seeds for 80% (α = {a})"]
    rows = [[c.dataset, *(getattr(c, f) for f in cols), c.metric, c.fusion, c.baseline,
             str(c.n),
             fnum(c.dz, 2, signed=True), fnum(c.power_at_holm_alpha, 2),
             _seeds(c.seeds_for_80_power_at_holm_alpha), fnum(c.power, 2),
             _seeds(c.seeds_for_80_power)]
            for c in report.comparisons]
    return Table("Seeds needed (two-sided paired t; post hoc: computed at the observed d_z, "
                 "which overstates power when the effect estimate is noisy)", headers, rows,
                 [f"power at α/m: at α/m = {am:.3g}, Holm's first step over the report's m "
                  "comparisons (the threshold the smallest p must clear, what the verdict "
                  f"uses; JSON `power_at_holm_alpha`); power at α: at unadjusted α = {a} "
                  "(JSON `power`)",
                  "— : undefined (SD 0 or n < 2) or unbounded (d_z = 0)"])


def chance_table(report: Report) -> Table:
    """Every arm tested against chance: mean accuracy, 1/K, Holm p, learned; regimes
    short -> long like every other table."""
    cols = arm_columns(report)
    rank = {r.dataset: r.rank for r in report.regimes}
    tests = sorted(report.chance.tests, key=lambda t: rank.get(t.dataset, len(rank)))
    headers = ["dataset", *cols, "metric", "fusion", "n", "K", "chance", "from", "mean", "t",
               "p", "p_holm", "learn rate", "learned"]
    rows = [[t.dataset, *(getattr(t, f) for f in cols), t.metric, t.fusion, str(t.n),
             DASH if t.num_classes is None else str(t.num_classes),
             fnum(t.chance_level, 3), t.chance_source, fnum(t.mean), fnum(t.t, 2),
             fp(t.p), fp(t.p_holm), learn_rate_text(t), t.learned] for t in tests]
    return Table("Does each arm beat chance?", headers, rows,
                 [CHANCE_METHOD, "learn rate: seeds on which the arm beat chance by the exact "
                  "per-seed binomial test (— without a recorded test size)"])


def learn_rate_text(t: ChanceTest) -> str:
    """'3 of 5 seeds' (the exact per-seed learn rate), a dash when it is not known."""
    return DASH if t.learn_n is None else f"{t.learn_count} of {t.learn_n} seeds"


def arms_table(report: Report, short: bool = False) -> Table:
    """Every arm over its seeds: mean, per-seed SD, range (the seed noise), chance, learned.
    short (the terminal's narrow form): the dataset's name instead of its regime label, and
    a column holding one value in every row said once in the title instead."""
    label = {} if short else {r.dataset: r.label for r in report.regimes}
    cols = arm_columns(report)
    headers = ["dataset", *cols, "metric", "fusion", "n", "mean", "per-seed SD", "min–max",
               "chance", "learned?"]
    rows = [[label.get(a.dataset, a.dataset), *(getattr(a, f) for f in cols), a.metric,
             a.fusion,
             str(a.n), fnum(a.mean), fnum(a.sd),
             f"{fnum(a.min, 3)}–{fnum(a.max, 3)}", fnum(a.chance_level, 3),
             a.learned] for a in report.arms]
    title = "Each arm over its seeds"
    if short:
        title, headers, rows = constant_columns(title, headers, rows, [*cols, "metric"])
    return Table(title, headers, rows,
                 ["per-seed SD: sample SD over seeds (ddof 1), the noise each paired Δ is "
                  "judged against; chance: the arm's test majority rate (1/K when none is "
                  "recorded); learned?: does the arm's accuracy beat chance (the exact per-seed "
                  "test, learned on most seeds; else a Holm-adjusted t-test over its seeds)? A "
                  "'no' withholds equivalent in every comparison with that arm, and makes one "
                  "with another 'no' arm 'not learned'"])


def constant_columns(title: str, headers: list[str], rows: list[list[str]],
                     names: list[str]) -> tuple[str, list[str], list[list[str]]]:
    """Those of `names` whose column holds one value in every row go into the title
    ('title (pe=sinusoidal, test_acc)') and out of the table."""
    keep, said = [], []
    for i, h in enumerate(headers):
        values = {r[i] for r in rows}
        if h in names and len(values) == 1:
            v = values.pop()
            said.append(v if h == "metric" else f"{h}={v}")
        else:
            keep.append(i)
    pick = lambda row: [row[i] for i in keep]  # noqa: E731
    return (title + (f" ({', '.join(said)})" if said else ""), pick(headers),
            [pick(r) for r in rows])


def _mean_sd(values: np.ndarray) -> str:
    if values.size == 0:
        return DASH
    sd = f"{values.std(ddof=1):.4f}" if values.size > 1 else DASH
    return f"{values.mean():.4f} ± {sd} (n={values.size})"


def fusion_by_dataset_tables(report: Report) -> list[Table]:
    """Paper table: mean ± sd per fusion (rows) × dataset (columns), per (encoder,) pe and
    metric."""
    out = []
    base = report.settings.axis.value("fusion")
    for metric in report.settings.metrics:
        vals = usable_values(report.table, metric)
        for (encoder, pe), sub in vals.groupby(["encoder", "pe"], sort=True):
            datasets = [r.dataset for r in report.regimes if r.dataset in set(sub["dataset"])]
            fusions = reference_first(sub["fusion"].unique(), base)
            rows = [[f] + [_mean_sd(sub[(sub["fusion"] == f) & (sub["dataset"] == d)]["value"]
                                    .to_numpy()) for d in datasets] for f in fusions]
            labels = [r.label for r in report.regimes if r.dataset in datasets]
            where = f"pe={pe}" if encoder == DEFAULT_ENCODER else f"encoder={encoder}, pe={pe}"
            out.append(Table(f"{metric}: mean ± sd over seeds, {where}", ["fusion"] + labels,
                             rows))
    return out


def pe_by_fusion_tables(report: Report) -> list[Table]:
    """Paper table: PE (rows) × fusion (columns) for one dataset, per dataset, (encoder,)
    and metric."""
    out = []
    base = report.settings.axis.value("fusion")
    for metric in report.settings.metrics:
        vals = usable_values(report.table, metric)
        for r in report.regimes:
            for encoder, sub in vals[vals["dataset"] == r.dataset].groupby("encoder", sort=True):
                fusions = reference_first(sub["fusion"].unique(), base)
                rows = [[pe] + [_mean_sd(sub[(sub["pe"] == pe) & (sub["fusion"] == f)]["value"]
                                         .to_numpy()) for f in fusions]
                        for pe in sorted(sub["pe"].unique())]
                enc = "" if encoder == DEFAULT_ENCODER else f" (encoder={encoder})"
                out.append(Table(f"{metric} on {r.label}{enc}: PE × fusion, mean ± sd",
                                 ["pe"] + fusions, rows))
    return out


def variant_by_dataset_tables(report: Report) -> list[Table]:
    """Paper table across encoders: mean ± sd per variant (rows, full labels, the
    baseline's first) × dataset (columns), per metric. Only where the data holds a
    non-standard encoder or the baseline is a full variant label."""
    axis = report.settings.axis
    if axis.is_fusion and not show_encoder(report):
        return []
    out = []
    for metric in report.settings.metrics:
        vals = usable_values(report.table, metric)
        labels = vals["encoder"] + "/" + vals["pe"] + "/" + vals["fusion"]
        variants = sorted({Variant.parse(v) for v in labels},
                          key=lambda v: (not axis.matches(v), v.label))
        datasets = [r for r in report.regimes if r.dataset in set(vals["dataset"])]
        rows = [[v.label] + [_mean_sd(vals[(labels == v.label) & (vals["dataset"] == r.dataset)]
                                      ["value"].to_numpy()) for r in datasets]
                for v in variants]
        out.append(Table(f"{metric}: mean ± sd over seeds per variant (encoder/pe/fusion)",
                         ["variant"] + [r.label for r in datasets], rows))
    return out


def reference_first(fusions: object, baseline: str | None) -> list[str]:
    """The distinct names, sorted, with the reference (if present) first."""
    fs = sorted(set(fusions))
    return ([baseline] if baseline in fs else []) + [f for f in fs if f != baseline]


# ----------------------------------------------------------------------------- claims
def fest(t: ClaimTest) -> str:
    """A claim test's measured effect with its interval, in its own kind."""
    if t.estimate is None or not math.isfinite(float(t.estimate)):
        return DASH
    if t.estimate_kind == "geometric-mean ratio":
        ci = (f" [{t.ci_low:.3g}×, {t.ci_high:.3g}×]" if t.ci_low is not None
              and math.isfinite(t.ci_low) else "")
        return f"{t.estimate:.4g}×{ci}"
    if t.ci_low is None or not math.isfinite(float(t.ci_low)):
        return fnum(t.estimate, signed=True)
    high = (f"{t.ci_high:+.4f}]" if t.ci_high is not None and math.isfinite(t.ci_high)
            else "+∞)")
    return f"{t.estimate:+.4f} [{t.ci_low:+.4f}, {high}"


def learned_summary(t: ClaimTest) -> str:
    """'yes' when every arm beats chance, 'n/a' without a chance level, else the arms that
    do not ('no: ressformer/none/add@synthetic-long')."""
    states = t.learned or {}
    if not states:
        return DASH
    if all(v == "n/a" for v in states.values()):
        return "n/a"
    bad = [f"{v}: {a}" for a, v in sorted(states.items()) if v != "yes"]
    return "yes" if not bad else "; ".join(bad)


def claims_table(cs: ClaimSetResult) -> Table:
    """One row per claim: the paper's words beside what the sweep measured."""
    headers = ["claim", "paper says", "where", "tested as", "trainings", "supports",
               "contradicts", "undecided", "paper's claim"]
    rows = [[f"{c.claim} {c.title}", f"“{c.quote}”", c.where,
             c.operationalisation + (f" — not run: {'; '.join(c.missing)}"
                                     if c.missing else ""),
             str(c.n_tests), str(c.n_supports), str(c.n_contradicts),
             str(c.n_undecided), c.support] for c in cs.claims]
    return Table(f"{cs.title}: the paper's claims and what the sweep measured", headers,
                 rows, [f"Paper: {cs.paper}.",
                        "paper's claim: SUPPORTS when some tests support it and none contradict "
                        "it, CONTRADICTS the reverse, mixed when both occur, does not decide "
                        "when no test decides, not run when its variants are absent"])


def claim_tests_table(cs: ClaimSetResult, contrast: bool = True) -> Table:
    """One row per claim test: contrast, measured effect, Holm p, verdict, support.

    contrast=False (the terminal) leaves the contrast to each claim's 'tested as' line and
    keeps a 'note' column: why a test did not run, or which seeds were dropped."""
    a = cs.alpha
    level = f"{100 * (1 - a):.0f}%"
    headers = ["test", "contrast" if contrast else "note", "n", f"measured [{level} CI]", "p",
               "p_holm", "p_tost_holm", "learned?", "verdict", "paper's claim"]
    rows = []
    for t in cs.tests:
        p = fp(t.p) + (" (1-sided)" if t.alternative == "greater" and t.p is not None
                       and math.isfinite(t.p) else "")
        # A dropped seed is a JSON-ready dict (schema.DROPPED_KEYS), as in the report.
        why = "; ".join(t.missing) or "; ".join(
            f"seed {d['seed']} dropped: {d['reason']}" for d in t.dropped)
        text = (t.contrast + (f" — {why}" if why else "")).strip(" —") if contrast else why
        rows.append([t.test, text, str(t.n), fest(t), p, fp(t.p_holm),
                     fp(t.tost_p_holm), learned_summary(t), t.verdict, t.support])
    foot = [f"Holm over the family of m = {cs.family_size} claim tests (every test of "
            f"this claim set with a defined p): a verdict needs its Holm-adjusted p below "
            f"α = {a}; TOST: Holm over {cs.tost_family_size} equivalence tests",
            "one-sided (orderings C3, C7): 'better' = the claimed order, Holm p < α; 'worse' = "
            "the opposite one-sided p < α/m",
            "ratio: geometric mean arm/reference over seeds with the exponentiated t-interval "
            "of the mean log ratio; an identical ratio on every seed is exact (no seed noise)",
            "learned?: yes when every arm of the test beats chance (the test split's majority "
            "rate); else each arm that does not ('no') or may not ('unknown'), which withholds "
            "the test's verdict; n/a: no chance level",
            cs.method]
    return Table("Claim tests (one per regime, or per cost metric and regime)", headers, rows,
                 foot)
