"""Report tables as (title, headers, rows) of strings, shared by terminal/Markdown/HTML.

A :class:`Table` is format-neutral; :mod:`analysis.text` and :mod:`analysis.render` lay it
out. Numbers are formatted once, here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analysis.chance import METHOD as CHANCE_METHOD
from analysis.regimes import lengths_known
from analysis.report import Report, usable_values

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


def blocks_by_regime(report: Report) -> list[tuple[str, str, str, list[dict]]]:
    """(metric, regime label, pe, comparisons) in metric, short->long regime, pe order."""
    out = []
    for metric in report.settings.metrics:
        for r in report.regimes:
            pes = sorted({c["pe"] for c in report.comparisons
                          if c["dataset"] == r.dataset and c["metric"] == metric})
            for pe in pes:
                comps = [c for c in report.comparisons if c["dataset"] == r.dataset
                         and c["pe"] == pe and c["metric"] == metric]
                out.append((metric, r.label, pe, comps))
    return out


def comparison_table(report: Report, metric: str, regime: str, pe: str,
                     comps: list[dict]) -> Table:
    """One regime's comparisons (the terminal's main table)."""
    level = f"{100 * (1 - report.settings.alpha):.0f}%"
    direction = "higher is better" if comps and comps[0]["higher_is_better"] else "lower is better"
    headers = ["fusion", "vs", "n", "mean Δ", "sd Δ", f"{level} t-CI", "p_t", "p_holm",
               "p_wilcoxon", "p_signflip", f"BCa {level} CI", "d_z", "k+/n", "power",
               "seeds@80% (α/m)", "seeds@80% (α)", "p_tost_holm", "learned?", "verdict"]
    rows, notes = [], []
    for c in comps:
        wmark = "" if c["wilcoxon_method"] == "exact" else "†"
        if wmark and c["wilcoxon_method"] not in notes:
            notes.append(c["wilcoxon_method"])
        boot = fci(c["boot_ci_low"], c["boot_ci_high"])
        rows.append([c["fusion"], c["baseline"], str(c["n"]), fnum(c["mean_delta"], signed=True),
                     fnum(c["sd_delta"]), fci(c["t_ci_low"], c["t_ci_high"]), fp(c["t_p"]),
                     fp(c["p_holm"]), fp(c["wilcoxon_p"]) + wmark, fp(c["signflip_p"]),
                     boot + ("*" if c["boot_descriptive"] and boot != DASH else ""),
                     fnum(c["dz"], 2, signed=True), f"{c['n_positive']}/{c['n']}",
                     fnum(c["power"], 2), _seeds(c["seeds_for_80_power_at_holm_alpha"]),
                     _seeds(c["seeds_for_80_power"]), fp(c["tost_p_holm"]), learned_cell(c),
                     c["verdict"]])
    foot = [f"† Wilcoxon method: {m}" for m in notes]
    if any(c["boot_descriptive"] for c in comps):
        foot.append("* descriptive: fewer than 10 pairs")
    foot.append("seeds@80%: post hoc, at the observed d_z; α/m = "
                f"{fnum(comps[0]['holm_first_step_alpha'], 4) if comps else DASH} is Holm's "
                f"first step (what the verdict needs), α = {report.settings.alpha} unadjusted")
    margin = comps[0]["equivalence_margin"] if comps else None
    if margin is not None:
        foot.append(f"equivalence margin ±{margin:g} ({metric} units), TOST, Holm across the "
                    "report's TOST tests")
    if any(c["learned"] != "n/a" for c in comps):
        foot.append("learned?: does the fusion / the reference beat chance 1/K "
                    f"({fnum(comps[0]['chance_level'], 3)} here; one-sided t, Holm)")
    title = f"{regime} · pe={pe} · {metric} ({direction})"
    return Table(title, headers, rows, foot)


def learned_cell(c: dict) -> str:
    """'yes/no': does the fusion / the reference beat chance ('n/a' without a chance level)."""
    if c["learned"] == "n/a":
        return "n/a"
    return f"{c['learned']}/{c['baseline_learned']}"


def _seeds(v: object) -> str:
    return DASH if v is None else str(v)


def interaction_table(report: Report) -> Table:
    tests = report.interaction["tests"]
    level = f"{100 * (1 - report.settings.alpha):.0f}%"
    # Without median_tokens the order is by name: never claim short/long then.
    by_length = lengths_known(report.regimes)
    order = "datasets (short→long)" if by_length else "datasets (by name; lengths unknown)"
    headers = ["fusion", "vs", "pe", "metric", order, "n", "Welch F (df)", "p", "p_holm",
               "contrast", "Δ difference", f"{level} Welch CI", "p_diff"]
    rows = []
    for t in tests:
        df = (f"{fnum(t['welch_f'], 2)} ({fnum(t['df_num'], 0)}, {fnum(t['df_denom'], 1)})"
              if t["welch_f"] is not None and math.isfinite(t["welch_f"]) else DASH)
        rows.append([t["fusion"], t["baseline"], t["pe"], t["metric"],
                     (" < " if by_length else ", ").join(t["datasets"]),
                     "/".join(map(str, t["n_per_dataset"])), df, fp(t["welch_p"]),
                     fp(t["p_holm"]), f"Δ {t['long_dataset']} − Δ {t['short_dataset']}",
                     fnum(t["diff_in_deltas"], signed=True),
                     fci(t["diff_ci_low"], t["diff_ci_high"]), fp(t["diff_p"])])
    return Table("Does the fusion effect differ across these datasets?", headers, rows,
                 [report.interaction["method"]])


def dropped_table(report: Report) -> Table:
    headers = ["dataset", "pe", "metric", "fusion", "vs", "seed", "reason", "detail"]
    rows = [[d["dataset"], d["pe"], d["metric"] or DASH, d["fusion"], d["baseline"] or DASH,
             str(d["seed"]), d["reason"], d["detail"]] for d in report.dropped]
    return Table(f"Dropped pairs ({len(rows)})", headers, rows)


def seeds_needed_table(report: Report) -> Table:
    """Per comparison: observed d_z, post hoc power and seeds for 80% power, at alpha/m
    (Holm's first step: what the verdict applies) and at unadjusted alpha."""
    a = report.settings.alpha
    am = report.comparisons[0]["holm_first_step_alpha"] if report.comparisons else a
    headers = ["dataset", "pe", "metric", "fusion", "vs", "n", "d_z", f"power (α/m = {am:.3g})",
               f"seeds for 80% (α/m = {am:.3g})", f"power (α = {a})", f"seeds for 80% (α = {a})"]
    rows = [[c["dataset"], c["pe"], c["metric"], c["fusion"], c["baseline"], str(c["n"]),
             fnum(c["dz"], 2, signed=True), fnum(c["power_at_holm_alpha"], 2),
             _seeds(c["seeds_for_80_power_at_holm_alpha"]), fnum(c["power"], 2),
             _seeds(c["seeds_for_80_power"])]
            for c in report.comparisons]
    return Table("Seeds needed (two-sided paired t; post hoc: computed at the observed d_z, "
                 "which overstates power when the effect estimate is noisy)", headers, rows,
                 ["α/m: Holm's first step over the report's m comparisons, the threshold the "
                  "smallest p must clear; α: unadjusted",
                  "— : undefined (SD 0 or n < 2) or unbounded (d_z = 0)"])


def chance_table(report: Report) -> Table:
    """Every arm tested against chance: mean accuracy, 1/K, Holm p, learned."""
    headers = ["dataset", "pe", "metric", "fusion", "n", "K", "chance", "mean", "t", "p",
               "p_holm", "learned"]
    rows = [[t["dataset"], t["pe"], t["metric"], t["fusion"], str(t["n"]),
             DASH if t["num_classes"] is None else str(t["num_classes"]),
             fnum(t["chance_level"], 3), fnum(t["mean"]), fnum(t["t"], 2), fp(t["p"]),
             fp(t["p_holm"]), t["learned"]] for t in report.chance["tests"]]
    return Table("Does each arm beat chance?", headers, rows, [CHANCE_METHOD])


def arms_table(report: Report) -> Table:
    """Every arm over its seeds: mean, per-seed SD, range (the seed noise), chance, learned."""
    label = {r.dataset: r.label for r in report.regimes}
    headers = ["dataset", "pe", "metric", "fusion", "n", "mean", "per-seed SD", "min–max",
               "chance", "learned?"]
    rows = [[label.get(a["dataset"], a["dataset"]), a["pe"], a["metric"], a["fusion"],
             str(a["n"]), fnum(a["mean"]), fnum(a["sd"]),
             f"{fnum(a['min'], 3)}–{fnum(a['max'], 3)}", fnum(a["chance_level"], 3),
             a["learned"]] for a in report.arms]
    return Table("Each arm over its seeds", headers, rows,
                 ["per-seed SD: sample SD over seeds (ddof 1), the noise each paired Δ is "
                  "judged against; chance: 1/K for accuracy-like metrics; learned?: beats "
                  "chance (one-sided t, Holm)"])


def _mean_sd(values: np.ndarray) -> str:
    if values.size == 0:
        return DASH
    sd = f"{values.std(ddof=1):.4f}" if values.size > 1 else DASH
    return f"{values.mean():.4f} ± {sd} (n={values.size})"


def fusion_by_dataset_tables(report: Report) -> list[Table]:
    """Paper table: mean ± sd per fusion (rows) × dataset (columns), per pe and metric."""
    out = []
    for metric in report.settings.metrics:
        vals = usable_values(report.table, metric)
        for pe in sorted(vals["pe"].unique()):
            sub = vals[vals["pe"] == pe]
            datasets = [r.dataset for r in report.regimes if r.dataset in set(sub["dataset"])]
            fusions = _fusion_order(sub["fusion"].unique(), report.settings.baseline)
            rows = [[f] + [_mean_sd(sub[(sub["fusion"] == f) & (sub["dataset"] == d)]["value"]
                                    .to_numpy()) for d in datasets] for f in fusions]
            labels = [r.label for r in report.regimes if r.dataset in datasets]
            out.append(Table(f"{metric}: mean ± sd over seeds, pe={pe}", ["fusion"] + labels, rows))
    return out


def pe_by_fusion_tables(report: Report) -> list[Table]:
    """Paper table: PE (rows) × fusion (columns) for one dataset, per dataset and metric."""
    out = []
    for metric in report.settings.metrics:
        vals = usable_values(report.table, metric)
        for r in report.regimes:
            sub = vals[vals["dataset"] == r.dataset]
            if sub.empty:
                continue
            fusions = _fusion_order(sub["fusion"].unique(), report.settings.baseline)
            rows = [[pe] + [_mean_sd(sub[(sub["pe"] == pe) & (sub["fusion"] == f)]["value"]
                                     .to_numpy()) for f in fusions]
                    for pe in sorted(sub["pe"].unique())]
            out.append(Table(f"{metric} on {r.label}: PE × fusion, mean ± sd", ["pe"] + fusions, rows))
    return out


def _fusion_order(fusions: object, baseline: str) -> list[str]:
    fs = sorted(set(fusions))
    return ([baseline] if baseline in fs else []) + [f for f in fs if f != baseline]
