"""The adversarial tables every terminal check runs on: the demo tables
(fusion_sweep.analysis.demo) and each overclaim file (tests/overclaim_files.py), analysed
as `fusion-sweep stats` would (margin 0.01, a small bootstrap). `reports()` builds each case's
Report once per test session."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import pandas as pd

from fusion_sweep.analysis.caveats import full
from fusion_sweep.analysis.demo import synthetic_ressformer_results, synthetic_results
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.report import Report, Settings, analyze

sys.path.insert(0, str(Path(__file__).parent))
import overclaim_files  # noqa: E402

# case -> (table builder, Settings overrides)
CASES: dict[str, tuple] = {
    "demo": (synthetic_results, {}),
    "demo_default_like": (lambda: synthetic_results(pes=("sinusoidal",)).query(
        "fusion in ['add', 'concat', 'gate-vector']").reset_index(drop=True), {}),
    "demo_ressformer": (synthetic_ressformer_results,
                        {"baseline": "standard/sinusoidal/add",
                         "metrics": ("test_acc", "latency_ms_per_sample")}),
    **{f"overclaim_{name}": (build, {"metrics": tuple(
        m for m in ("test_acc", "test_macro_f1", "latency_ms_per_sample") if m in build())})
       for name, build in overclaim_files.CASES.items()},
}


@functools.cache
def report_of(case: str) -> Report:
    build, overrides = CASES[case]
    df: pd.DataFrame = build()
    settings = Settings(**{"margin": 0.01, "n_boot": 200, **overrides})
    return analyze(tidy(df), settings, {"kind": "file", "path": case})


def verdicts(report: Report) -> list[dict]:
    """Every verdict the report decides, keyed by what identifies it."""
    out = [{"key": list(c.key), "verdict": c.verdict, "win_verdict": c.win_verdict,
            "ratio_verdict": c.ratio_verdict, "verdict_flags": [full(f) for f in c.verdict_flags],
            "p_holm": c.p_holm, "sign_p_holm": c.sign_p_holm}
           for c in report.comparisons]
    out += [{"key": [t.metric, t.variant, t.baseline_variant, *t.datasets],
             "verdict": t.verdict} for t in report.interaction.tests]
    return out
