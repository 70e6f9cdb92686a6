"""Statistics for fusion-sweep: does a variant (encoder/pe/fusion) beat the baseline beyond
seed noise, and does a paper's claim hold under the paired protocol?

Pure functions over one tidy results table (see :mod:`fusion_sweep.analysis.schema`). The package
imports neither torch nor ray; mlflow is imported lazily, only by the MLflow input/output
functions in :mod:`fusion_sweep.analysis.mlflow_io`, so the analysis runs on any machine with the
scientific Python stack and a CSV/Parquet file.

Layers point down, no import cycles: schema < metrics, variants, caveats, estimands, winrate
< settings, load, guard, records < sections < pairing < stats < fixed, sequential, chance, regimes <
claims < grid, answer < report < tables, sequential_report < document < text, plots < render
< mlflow_io, cli.
Layout:
- :mod:`fusion_sweep.analysis.schema`   column names, JSON keys, labels, error type (identity,
  fingerprint and MLflow names come from :mod:`fusion_sweep.schema`, which is stdlib-only);
- :mod:`fusion_sweep.analysis.metrics`  direction of improvement and proportion checks, by metric name;
- :mod:`fusion_sweep.analysis.variants` variants and the comparison axis a baseline defines;
- :mod:`fusion_sweep.analysis.settings` `Settings` and the one home of every analysis default
  (alpha, baseline, metric, bootstrap count, rng seed, margin);
- :mod:`fusion_sweep.analysis.load`     results file -> tidy table; validation and filtering;
- :mod:`fusion_sweep.analysis.pairing`  pair trials by seed, with every dropped pair and its reason
  (fingerprints, superseded and mixed code versions);
- :mod:`fusion_sweep.analysis.caveats`  what qualifies a verdict, as typed values, and their renderings;
- :mod:`fusion_sweep.analysis.guard`    the one guard rule: the verdict a comparison may claim;
- :mod:`fusion_sweep.analysis.records`  the frozen records each stage builds, and their JSON;
- :mod:`fusion_sweep.analysis.sections` the report's other sections as frozen records (source,
  family, warnings, dropped pairs, interaction and chance tests), and their JSON;
- :mod:`fusion_sweep.analysis.chance`   does each arm beat chance (1/num_classes)? -> `not learned`;
- :mod:`fusion_sweep.analysis.stats`    per-comparison statistics (scipy / statsmodels);
- :mod:`fusion_sweep.analysis.fixed`    the fixed-n estimands, one entry each (registry FIXED_ESTIMANDS);
- :mod:`fusion_sweep.analysis.regimes`  length regimes and the interaction (regime x fusion) test;
- :mod:`fusion_sweep.analysis.sequential` anytime-valid decisions of an adaptive (--until-decided) sweep;
- :mod:`fusion_sweep.analysis.claims`   a paper's claims as claim tests (`--claims`; registry CLAIMS);
- :mod:`fusion_sweep.analysis.report`   the analysis driver (Holm, verdicts, warnings) and JSON;
- :mod:`fusion_sweep.analysis.tables`   format-neutral tables; :mod:`fusion_sweep.analysis.sequential_report`
  the sequential section;
- :mod:`fusion_sweep.analysis.document` the report as one ordered list of typed blocks, built once;
  :mod:`fusion_sweep.analysis.text` renders it for the terminal;
- :mod:`fusion_sweep.analysis.render`   `--report DIR`: the document as Markdown + HTML, its figures
  drawn by :mod:`fusion_sweep.analysis.plots`;
- :mod:`fusion_sweep.analysis.demo`     a synthetic results table with planted effects;
- :mod:`fusion_sweep.analysis.mlflow_io` the MLflow reader and the `stats` run writer;
- :mod:`fusion_sweep.analysis.cli`      the `fusion-sweep stats` subcommand.
"""
from __future__ import annotations

from fusion_sweep.analysis.schema import AnalysisError

__all__ = ["AnalysisError"]
