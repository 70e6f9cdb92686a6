"""Statistics for fusion-sweep: does a variant (encoder/pe/fusion) beat the baseline beyond
seed noise, and does a paper's claim hold under the paired protocol?

Pure functions over one tidy results table (see :mod:`analysis.schema`). The package
imports neither torch nor ray; mlflow is imported lazily, only by the MLflow input/output
functions in :mod:`analysis.mlflow_io`, so the analysis runs on any machine with the
scientific Python stack and a CSV/Parquet file.

Layout:
- :mod:`analysis.schema`   column names, JSON keys, error type (identity, fingerprint and
  MLflow names come from :mod:`fusion_sweep.schema`, which is stdlib-only);
- :mod:`analysis.metrics`  direction of improvement and proportion checks, by metric name;
- :mod:`analysis.variants` variants and the comparison axis a baseline defines;
- :mod:`analysis.load`     results file -> tidy table; validation and filtering;
- :mod:`analysis.pairing`  pair trials by seed, with every dropped pair and its reason
  (fingerprints, superseded and mixed code versions);
- :mod:`analysis.chance`   does each arm beat chance (1/num_classes)? -> `not learned`;
- :mod:`analysis.stats`    per-comparison statistics (scipy / statsmodels);
- :mod:`analysis.regimes`  length regimes and the interaction (regime x fusion) test;
- :mod:`analysis.report`   the analysis driver (Holm, verdicts, warnings) and JSON;
- :mod:`analysis.claims`   a paper's claims as claim tests (`--claims`; registry CLAIMS);
- :mod:`analysis.tables`   format-neutral tables; :mod:`analysis.text` the terminal;
- :mod:`analysis.render`   `--report DIR`: Markdown + HTML; :mod:`analysis.plots` figures;
- :mod:`analysis.demo`     a synthetic results table with planted effects;
- :mod:`analysis.mlflow_io` the MLflow reader and the `stats` run writer;
- :mod:`analysis.cli`      the `fusion-sweep stats` subcommand.
"""
from __future__ import annotations

from analysis.schema import AnalysisError

__all__ = ["AnalysisError"]
