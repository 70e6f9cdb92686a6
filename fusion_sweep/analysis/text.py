"""Plain-text terminal output: warnings first, then one table per regime (and the claims)."""
from __future__ import annotations

from fusion_sweep.analysis.report import Report
from fusion_sweep.analysis.sequential_report import sequential_table
from fusion_sweep.analysis.tables import (
    Table, arms_table, blocks_by_regime, claim_tests_table, comparison_table, dropped_table,
    interaction_table,
)


def layout(table: Table, indent: str = "  ") -> str:
    """Fixed-width columns; numbers right-aligned, text left-aligned."""
    cols = list(zip(*([table.headers] + table.rows))) if table.rows else [[h] for h in table.headers]
    widths = [max(len(str(v)) for v in col) for col in cols]

    def line(vals: list[str]) -> str:
        cells = [v.rjust(w) if is_numeric_cell(v) else v.ljust(w) for v, w in zip(vals, widths)]
        return indent + "  ".join(cells).rstrip()

    out = [table.title, line(table.headers), indent + "  ".join("-" * w for w in widths)]
    out += [line(r) for r in table.rows] or [indent + "(none)"]
    out += [indent + f for f in table.footnotes]
    return "\n".join(out)


def is_numeric_cell(v: str) -> bool:
    """Right-align numbers, intervals, p-values and dashes; left-align names."""
    return bool(v) and (v[0].isdigit() or v[0] in "+-[<—")


def format_text(report: Report) -> str:
    """The full terminal report."""
    s = report.settings
    parts = [f"fusion-sweep stats · source: {source_line(report.source)} · baseline={s.baseline} · "
             f"alpha={s.alpha} · margin={s.margin_label()} · "
             f"bootstrap={s.n_boot} · rng-seed={s.rng_seed}"]
    if report.warnings:
        parts.append("Warnings:\n" + "\n".join(f"  ! [{w['code']}] {w['message']}"
                                               for w in report.warnings))
    if report.arms:
        parts.append(layout(arms_table(report)))
    if report.sequential is not None:
        seq = report.sequential
        parts.append(layout(sequential_table(
            report.sequential_results,
            f"Sequential decisions (adaptive seeds, {seq['metric']}): the verdicts of this sweep")))
    for metric, regime, group, comps in blocks_by_regime(report):
        parts.append(layout(descriptive(report, comparison_table(report, metric, regime, group,
                                                                 comps))))
    if report.interaction["tests"]:
        parts.append(layout(interaction_table(report)))
    else:
        parts.append("Across datasets: the test needs one comparison in >= 2 datasets "
                     "with >= 2 pairs each")
    parts.append(layout(dropped_table(report)))
    parts.append(VERDICT_RULE)
    if report.claims is not None:
        parts.append(format_claims(report.claims))
    return "\n\n".join(parts) + "\n"


def descriptive(report: Report, table: Table) -> Table:
    """An adaptive sweep's fixed-n table, labelled as descriptive (its seed count depended
    on the data, so its p-values and verdicts are not valid tests)."""
    if report.sequential is None:
        return table
    return Table(f"{table.title} ({report.sequential['fixed_n_label']})", table.headers,
                 table.rows, table.footnotes)


def format_claims(claims: dict) -> str:
    """The claims report: each claim's words beside its result, then every claim test."""
    out = [f"CLAIMS · {claims['title']} · {claims['paper']}",
           f"Holm over the family of m = {claims['family_size']} claim tests "
           f"(alpha = {claims['alpha']}); TOST over {claims['tost_family_size']}"]
    for c in claims["claims"]:
        tally = (f"{c['n_supports']} support, {c['n_contradicts']} contradict, "
                 f"{c['n_undecided']} undecided of {c['n_tests']} tests" if c["n_tests"] else
                 "not run: " + "; ".join(c["missing"]))
        out.append(f"{c['claim']} {c['title']}: {c['support']} ({tally})\n"
                   f"    paper ({c['where']}): “{c['quote']}”\n"
                   f"    tested as: {c['operationalisation']}")
    out.append(layout(claim_tests_table(claims, contrast=False)))
    return "\n\n".join(out)


VERDICT_RULE = (
    "Verdict: not learned = neither arm beats chance (1/num_classes; accuracy-like metrics); "
    "better/worse = Holm-adjusted paired-t p < alpha and the t-interval excludes 0; "
    "equivalent = Holm-adjusted TOST p < alpha within ±margin (noted when the t-interval "
    "excludes 0); else inconclusive. No effect is never claimed without TOST.")


def source_line(src: dict) -> str:
    if src.get("kind") == "mlflow":
        return (f"MLflow {src.get('tracking_uri')} experiment={src.get('experiment')} "
                f"sweep={src.get('sweep')} ({src.get('n_runs')} trial runs)")
    return str(src.get("path", src.get("kind", "table")))
