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
fp_dropout         str|NA    dropout-stream fingerprint (optional)
code_fingerprint   str|NA    hash of the code that computed the trial (optional)
median_tokens      float     median test-doc token length of the dataset (optional, NaN)
num_classes        float     the dataset's class count, for the chance level (optional, NaN)
run_id             str|NA    MLflow run id (MLflow input only)
<metric>           float     every other numeric column is a metric (test_acc, ...)
=================  ========  ==============================================================
"""
from __future__ import annotations

# Identity and fingerprints have one home, shared with the sweep layer that writes them.
from fusion_sweep.schema import FINGERPRINT_COLUMNS, IDENTITY_FIELDS

KEY_COLUMNS: tuple[str, ...] = IDENTITY_FIELDS
FP_COLUMNS: tuple[str, ...] = FINGERPRINT_COLUMNS
META_COLUMNS: tuple[str, ...] = ("status", *FP_COLUMNS, "code_fingerprint", "median_tokens",
                                 "num_classes", "run_id", "trial_key")
NON_METRIC_COLUMNS: frozenset[str] = frozenset((*KEY_COLUMNS, *META_COLUMNS))

FINISHED = "FINISHED"

# Direction of improvement by name (--direction auto), after the sweep's `directions`.
# Exact names first (they would otherwise match no rule, or the wrong one), then
# substrings of the lower-cased name. A name matching both substring lists, or neither,
# has no direction: the analysis refuses it rather than guessing "higher".
LOWER_IS_BETTER: frozenset[str] = frozenset(
    {"latency_ms_per_sample", "train_seconds", "params", "fusion_params", "epoch_seconds"}
)
HIGHER_IS_BETTER: frozenset[str] = frozenset({"tokens_per_second", "epoch_tokens_per_second"})
LOWER_IS_BETTER_PARTS: tuple[str, ...] = ("error", "err", "loss", "perplexity", "latency")
HIGHER_IS_BETTER_PARTS: tuple[str, ...] = ("accuracy", "acc", "f1", "auc")
# Accuracy-like metrics (chance level 1/num_classes applies) and proportions (must lie in [0, 1]).
ACCURACY_PARTS: tuple[str, ...] = ("acc",)
PROPORTION_PARTS: tuple[str, ...] = ("acc", "f1", "auc")

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
    # Holm over the report's TOST family; the `equivalent` verdict uses this one.
    "tost_p_holm",
    # Post hoc power at the observed d_z, at the alpha the verdict actually uses (Holm's
    # first step, alpha/m); `power` / `seeds_for_80_power` above are at unadjusted alpha.
    "holm_first_step_alpha", "power_at_holm_alpha", "seeds_for_80_power_at_holm_alpha",
    # Does each arm beat chance (1/num_classes)? LEARNED_STATES; see `chance` below.
    "chance_level", "learned", "baseline_learned",
)
COMPARISON_KEYS: tuple[str, ...] = REQUIRED_COMPARISON_KEYS + EXTRA_COMPARISON_KEYS

TOP_LEVEL_KEYS: tuple[str, ...] = (
    "source", "settings", "regimes", "warnings", "arms", "comparisons", "dropped",
    "interaction", "chance",
)
# One entry per arm (dataset, pe, metric, fusion): the per-seed spread that every paired
# comparison is judged against. sd is the sample SD over seeds (ddof 1; null for n < 2).
ARM_KEYS: tuple[str, ...] = (
    "dataset", "pe", "metric", "fusion", "n", "mean", "sd", "min", "max", "chance_level",
    "learned",
)
DROPPED_KEYS: tuple[str, ...] = (
    "dataset", "pe", "metric", "fusion", "baseline", "seed", "reason", "detail",
)
WARNING_KEYS: tuple[str, ...] = ("code", "message")
INTERACTION_TEST_KEYS: tuple[str, ...] = (
    "pe", "metric", "fusion", "baseline", "datasets", "n_per_dataset", "welch_f",
    "df_num", "df_denom", "welch_p", "p_holm", "long_dataset", "short_dataset",
    "diff_in_deltas", "diff_ci_low", "diff_ci_high", "diff_p", "notes",
    # "median_tokens" (long/short are the longest/shortest) or "name" (lengths unknown:
    # long_dataset/short_dataset are merely the last/first by name).
    "ordered_by",
)
# One entry of `chance.tests`: one-sided one-sample t of an arm's per-seed accuracy > 1/K.
CHANCE_TEST_KEYS: tuple[str, ...] = (
    "dataset", "pe", "metric", "fusion", "n", "num_classes", "chance_level", "mean", "t",
    "p", "p_holm", "learned",
)
LEARNED_STATES: tuple[str, ...] = ("yes", "no", "unknown", "n/a")

# The verdicts: the one place their names are spelled (colours: plots and the HTML report).
BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED = (
    "better", "worse", "equivalent", "inconclusive", "not learned")
VERDICTS: tuple[str, ...] = (BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED)
VERDICT_COLORS: dict[str, str] = {BETTER: "#1a7f37", WORSE: "#cf222e", EQUIVALENT: "#0969da",
                                  INCONCLUSIVE: "#6e7781", NOT_LEARNED: "#9a6700"}
DROP_REASONS: tuple[str, ...] = (
    "missing_trial", "failed_trial", "non_finite_metric", "duplicate_seed",
    "fingerprint_mismatch", "superseded_code", "code_mismatch",
)


class AnalysisError(ValueError):
    """A bad input (file, column, flag value). The CLI prints it and exits 2."""
