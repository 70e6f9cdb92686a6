"""The tidy results schema shared by every loader, and the JSON output schema.

Tidy table: one row per trial.

=================  ========  ==============================================================
column             dtype     meaning
=================  ========  ==============================================================
dataset            str       dataset name (one length regime per dataset)
pe                 str       positional-encoding name
fusion             str       fusion-operator name
seed               int64     trial seed (the pairing key)
status             str       FINISHED / FAILED / KILLED / RUNNING ... (FINISHED if absent)
fp_split           str|NA    data-split fingerprint (optional)
fp_batch_order     str|NA    batch-order fingerprint (optional)
fp_shared_init     str|NA    shared-initial-weights fingerprint (optional)
median_tokens      float     median test-doc token length of the dataset (optional, NaN)
run_id             str|NA    MLflow run id (MLflow input only)
<metric>           float     every other numeric column is a metric (test_acc, ...)
=================  ========  ==============================================================
"""
from __future__ import annotations

KEY_COLUMNS: tuple[str, ...] = ("dataset", "pe", "fusion", "seed")
FP_COLUMNS: tuple[str, ...] = ("fp_split", "fp_batch_order", "fp_shared_init")
META_COLUMNS: tuple[str, ...] = ("status", *FP_COLUMNS, "median_tokens", "run_id", "trial_key")
NON_METRIC_COLUMNS: frozenset[str] = frozenset((*KEY_COLUMNS, *META_COLUMNS))

FINISHED = "FINISHED"

# Metrics where a *decrease* is an improvement; used by --direction auto.
LOWER_IS_BETTER: frozenset[str] = frozenset(
    {"latency_ms_per_sample", "train_seconds", "params", "test_loss", "val_loss", "loss"}
)

# The keys every entry of `comparisons` carries (issue 4, in this order).
REQUIRED_COMPARISON_KEYS: tuple[str, ...] = (
    "dataset", "pe", "metric", "fusion", "baseline", "n", "mean_delta", "sd_delta",
    "t_ci_low", "t_ci_high", "t_p", "wilcoxon_p", "wilcoxon_method", "signflip_p",
    "boot_ci_low", "boot_ci_high", "dz", "n_positive", "p_holm", "tost_p", "power",
    "seeds_for_80_power", "min_p_t", "min_p_wilcoxon", "verdict",
)
# Documented extras: context needed to audit a row without re-running the analysis.
EXTRA_COMPARISON_KEYS: tuple[str, ...] = (
    "regime", "median_tokens", "higher_is_better", "seeds", "deltas", "n_negative", "n_zero",
    "t_df", "signflip_method", "min_p_signflip", "boot_descriptive", "boot_method",
    "equivalence_margin", "notes",
)
COMPARISON_KEYS: tuple[str, ...] = REQUIRED_COMPARISON_KEYS + EXTRA_COMPARISON_KEYS

TOP_LEVEL_KEYS: tuple[str, ...] = (
    "source", "settings", "regimes", "warnings", "comparisons", "dropped", "interaction",
)
DROPPED_KEYS: tuple[str, ...] = (
    "dataset", "pe", "metric", "fusion", "baseline", "seed", "reason", "detail",
)
WARNING_KEYS: tuple[str, ...] = ("code", "message")
INTERACTION_TEST_KEYS: tuple[str, ...] = (
    "pe", "metric", "fusion", "baseline", "datasets", "n_per_dataset", "welch_f",
    "df_num", "df_denom", "welch_p", "p_holm", "long_dataset", "short_dataset",
    "diff_in_deltas", "diff_ci_low", "diff_ci_high", "diff_p", "notes",
)

VERDICTS: tuple[str, ...] = ("better", "worse", "equivalent", "inconclusive")
DROP_REASONS: tuple[str, ...] = (
    "missing_trial", "failed_trial", "non_finite_metric", "duplicate_seed",
    "fingerprint_mismatch",
)


class AnalysisError(ValueError):
    """A bad input (file, column, flag value). The CLI prints it and exits 2."""
