"""The tidy results schema shared by every loader, and the JSON output schema.

Tidy table: one row per trial.

=================  ========  ==============================================================
column             dtype     meaning
=================  ========  ==============================================================
dataset            str       dataset name (one length regime per dataset)
encoder            str       encoder variant label ("standard" when the input lacks it)
pe                 str       positional-encoding name ("unspecified" when the input lacks it)
fusion             str       fusion-operator name
seed               int64     trial seed (the pairing key)
status             str       FINISHED / FAILED / KILLED / RUNNING ... (FINISHED if absent)
fp_split           str|NA    data-split fingerprint (optional)
fp_batch_order     str|NA    batch-order fingerprint (optional)
fp_shared_init     str|NA    shared-initial-weights fingerprint (optional)
fp_dropout         str|NA    dropout-stream fingerprint (optional)
fp_encoder_init    str|NA    encoder-body initial weights (optional; compared only between
                             two trials with the same encoder label)
code_fingerprint   str|NA    hash of the code that computed the trial (optional)
code_components    str|NA    JSON {component: fingerprint} of that code (optional; pairs then
                             compare only the components both arms run)
superseded_by      str|NA    set on a run a relaunch retrained under new code (optional)
fp_platform        str|NA    hash of the platform the trial ran on (optional; pairs are kept
                             on one platform, else dropped as platform_mismatch)
platform           str|NA    that platform, readable (fusion_sweep.schema.platform_label)
median_tokens      float     median test-doc token length of the dataset (optional, NaN)
num_classes        float     the dataset's class count, for the chance level (optional, NaN)
run_id             str|NA    MLflow run id (MLflow input only)
<metric>           float     every other numeric column is a metric (test_acc, ...)
=================  ========  ==============================================================

A *variant* is (encoder, pe, fusion) within one dataset, labelled "encoder/pe/fusion"
(:mod:`fusion_sweep.analysis.variants`).
"""
from __future__ import annotations

from fusion_sweep.errors import UserError

# Identity and fingerprints have one home, shared with the sweep layer that writes them.
from fusion_sweep.schema import (  # DEFAULT_ENCODER: re-exported for the analysis modules
    DEFAULT_ENCODER, ENCODER_FINGERPRINT_COLUMNS, FINGERPRINT_COLUMNS, IDENTITY_FIELDS,
    LABEL_COLUMNS, VARIANT_FIELDS,
)  # noqa: F401
from fusion_sweep.schema import PLATFORM_COLUMN, PLATFORM_LABEL_COLUMN  # noqa: F401
from fusion_sweep.schema import (  # noqa: F401
    ADAPTIVE_COLUMN, CODE_COMPONENTS_COLUMN, CODE_FINGERPRINT_COLUMN, COMPARISON_FAMILY_COLUMN,
    LENGTH_REGIME_COLUMN, LENGTH_REGIMES, REGIME_COLUMNS, SUPERSEDED_COLUMN, TEST_MAJORITY_RATE,
    TEST_SIZE,
)

KEY_COLUMNS: tuple[str, ...] = IDENTITY_FIELDS
# What is compared within a dataset; the comparison axis is built from these (variants.py).
VARIANT_COLUMNS: tuple[str, ...] = VARIANT_FIELDS
# Checked in every pair.
FP_COLUMNS: tuple[str, ...] = FINGERPRINT_COLUMNS
# Checked only in a pair whose two arms have the same encoder label (the bodies of two
# different encoders differ by construction).
ENCODER_FP_COLUMNS: tuple[str, ...] = ENCODER_FINGERPRINT_COLUMNS
# Which run a row is, in MLflow (run_id: MLflow input; mlflow_run_id: a launch's
# results.csv) and how often it was tried (results.csv's attempts): never a metric.
RUN_COLUMNS: tuple[str, ...] = ("run_id", "mlflow_run_id", "trial_key", "attempts")
META_COLUMNS: tuple[str, ...] = ("status", *FP_COLUMNS, *ENCODER_FP_COLUMNS,
                                 CODE_FINGERPRINT_COLUMN, CODE_COMPONENTS_COLUMN,
                                 SUPERSEDED_COLUMN, "median_tokens", "num_classes", *RUN_COLUMNS,
                                 PLATFORM_COLUMN, PLATFORM_LABEL_COLUMN, *LABEL_COLUMNS,
                                 *REGIME_COLUMNS, LENGTH_REGIME_COLUMN, TEST_MAJORITY_RATE,
                                 TEST_SIZE, COMPARISON_FAMILY_COLUMN, ADAPTIVE_COLUMN)
# The column roles: identity (KEY_COLUMNS), metadata (META_COLUMNS), and every other
# column a metric; `load.metric_columns` lists the metrics by these roles.
NON_METRIC_COLUMNS: frozenset[str] = frozenset((*KEY_COLUMNS, *META_COLUMNS))

FINISHED = "FINISHED"
# A blank cell of a status column: dropped as `blank_status`, never read as FINISHED.
BLANK_STATUS = "(BLANK)"

# Direction of improvement by name (--direction auto), after the sweep's `directions`.
# Exact names first (they would otherwise match no rule, or the wrong one), then
# substrings of the lower-cased name. A name matching both substring lists, or neither,
# has no direction: the analysis refuses it rather than guessing "higher".
LOWER_IS_BETTER: frozenset[str] = frozenset(
    {"latency_ms_per_sample", "train_seconds", "params", "fusion_params", "epoch_seconds",
     "flops_per_token"}
)
HIGHER_IS_BETTER: frozenset[str] = frozenset({"tokens_per_second", "epoch_tokens_per_second"})
LOWER_IS_BETTER_PARTS: tuple[str, ...] = ("error", "err", "loss", "perplexity", "latency")
HIGHER_IS_BETTER_PARTS: tuple[str, ...] = ("accuracy", "acc", "f1", "auc")
# Cost metrics (lower is better, strictly positive): besides the paired difference, each
# comparison reports the paired RATIO arm / reference as a geometric mean with a t-interval
# of the mean log ratio, exponentiated, and a verdict on it (Holm over the report's ratios).
COST_METRICS: frozenset[str] = frozenset(
    {"latency_ms_per_sample", "flops_per_token", "params", "train_seconds"})
# Accuracy-like metrics (chance level 1/num_classes applies) and proportions (must lie in [0, 1]).
ACCURACY_PARTS: tuple[str, ...] = ("acc",)
# Words of a metric's name (split at non-alphanumerics) that make an accuracy no TEST
# accuracy: the chance guard never reads a validation split or a maximum over epochs.
VALIDATION_PARTS: tuple[str, ...] = ("val", "valid", "validation", "dev")
SELECTED_PARTS: tuple[str, ...] = ("best", "max", "maximum", "peak", "top")
PROPORTION_PARTS: tuple[str, ...] = ("acc", "f1", "auc")

# The keys of each entry of `comparisons`: the fields of
# fusion_sweep.analysis.records.Comparison, in their order, documented there.

TOP_LEVEL_KEYS: tuple[str, ...] = (
    "source", "settings", "regimes", "warnings", "arms", "comparisons", "dropped",
    "interaction", "chance",
    # `--claims NAME`: the paper's claims against the sweep (fusion_sweep.analysis.claims); null without.
    "claims",
    # An adaptive sweep (`launch --until-decided`): the anytime-valid sequential decision of
    # each comparison (SEQUENTIAL_KEYS); null for a fixed-seed sweep.
    "sequential",
    # The answer at a glance: one cell per comparison (VERDICT_GRID_KEYS), metric as given,
    # regime short -> long; the first thing every report format shows.
    "verdict_grid",
    # The fixed-n Holm family: {"m": its size, "source": where m came from ("fixed by the
    # sweep", or "every comparison in FILE")}; a --dataset/--pe/--encoder selection never
    # changes it.
    "family",
    # The answer in words (fusion_sweep.analysis.answer): one entry per finding
    # (ANSWER_KEYS), the summary last; the same sentences the terminal prints first.
    "answer",
)
# One cell of `verdict_grid`: arm/reference are variant labels (encoder/pe/fusion); delta
# the mean paired difference; [ci_low, ci_high] its paired-t interval at level ci_level, the
# same for every cell (1 - alpha: the comparisons' t_ci_*); p_holm the Holm-adjusted paired-t
# p that decides the verdict (better/worse iff p_holm < alpha); arm_learned/reference_learned
# LEARNED_STATES.
VERDICT_GRID_KEYS: tuple[str, ...] = (
    "dataset", "arm", "reference", "delta", "ci_low", "ci_high", "ci_level", "n", "verdict",
    "metric", "regime", "arm_learned", "reference_learned",
    # `verdict` is about `estimand` ("mean Δ"); win_verdict about the win rate.
    "estimand", "win_verdict", "p_holm",
)
# One entry of `answer`: kind (ANSWER_KINDS), where (dataset, metric, group: the variant
# fields the baseline leaves open, "" when one group), the arms it is about and their
# reference (variant labels), and the sentence; the summary has kind "summary" and no arms.
ANSWER_KEYS: tuple[str, ...] = (
    "kind", "dataset", "metric", "group", "arms", "reference", "sentence",
)
ANSWER_KINDS: tuple[str, ...] = (
    "better", "worse", "equivalent", "inconclusive", "disagree", "withheld", "not learned",
    "summary",
    # issue 39: whether the effect differs across regimes (the interaction test), and an
    # adaptive sweep's sequential decisions (said first)
    "across regimes", "sequential",
)
# One entry per arm (dataset, variant, metric): the per-seed spread that every paired
# comparison is judged against. sd is the sample SD over seeds (ddof 1; null for n < 2).
ARM_KEYS: tuple[str, ...] = (
    "dataset", "encoder", "pe", "metric", "fusion", "variant", "n", "mean", "sd", "min", "max",
    "chance_level", "learned",
)
# As in `comparisons`: encoder/pe/fusion/variant are the arm's, baseline (user's form) and
# baseline_variant the reference's. A superseded run has metric, baseline and
# baseline_variant null (it is a run, not a pair).
# `sequential`: the sweep's adaptive settings, the multiplicity, the label of the fixed-n
# statistics, and one fusion_sweep.analysis.sequential.SequentialResult.to_dict() per comparison.
# m: the Bonferroni family size fixed at launch (never what a --dataset/--pairs selection
# shows); family_source: where m came from (the launch's record, or every trial of the input
# when an older launch recorded none); method/assumption: the sequential method and what its
# decisions rest on; results: only the comparisons of the launch's family that are shown.
SEQUENTIAL_KEYS: tuple[str, ...] = ("adaptive", "metric", "alpha", "m", "family_source",
                                    "method", "assumption", "fixed_n_label", "results")
# `fixed_n_label`: said wherever fixed-n statistics are shown for an adaptive sweep (issue 13
# §4): the seed count depended on the data, so fixed-n p-values are descriptive only.
DESCRIPTIVE_LABEL = "descriptive: the seed count was chosen adaptively"
DROPPED_KEYS: tuple[str, ...] = (
    "dataset", "encoder", "pe", "metric", "fusion", "baseline", "variant", "baseline_variant",
    "seed", "reason", "detail",
)
WARNING_KEYS: tuple[str, ...] = ("code", "message")
INTERACTION_TEST_KEYS: tuple[str, ...] = (
    "pe", "metric", "fusion", "baseline", "datasets", "n_per_dataset", "welch_f",
    "df_num", "df_denom", "welch_p", "p_holm", "long_dataset", "short_dataset",
    "diff_in_deltas", "diff_ci_low", "diff_ci_high", "diff_p", "notes",
    # "median_tokens" (long/short are the longest/shortest) or "name" (lengths unknown:
    # long_dataset/short_dataset are merely the last/first by name).
    "ordered_by",
    # The variant pair tested across datasets (as in `comparisons`).
    "encoder", "variant", "baseline_variant",
    # Datasets left out because neither arm beats chance there, and the verdict: "differs"
    # (Holm-adjusted Welch p < alpha) or "inconclusive" (regimes.interaction_verdict).
    "excluded_not_learned", "verdict",
)
# One entry of `chance.tests`: one-sided one-sample t of an arm's per-seed accuracy > 1/K.
CHANCE_TEST_KEYS: tuple[str, ...] = (
    "dataset", "encoder", "pe", "metric", "fusion", "variant", "n", "num_classes",
    "chance_level", "mean", "t", "p", "p_holm", "learned",
    # chance_source: "test majority rate" (the test split's majority-class share, from the
    # data) or "1/K" (the labelled fallback when no test_majority_rate is recorded);
    # learn_method: how `learned` was decided; learn_count of learn_n seeds beat chance by the
    # exact per-seed binomial test (null without a test size): the per-arm learn rate.
    "chance_source", "learn_method", "learn_count", "learn_n",
)
LEARNED_STATES: tuple[str, ...] = ("yes", "no", "unknown", "n/a")

# The verdicts: the one place their names are spelled (colours: plots and the HTML report).
BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED = (
    "better", "worse", "equivalent", "inconclusive", "not learned")
VERDICTS: tuple[str, ...] = (BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED)
VERDICT_COLORS: dict[str, str] = {BETTER: "#1a7f37", WORSE: "#cf222e", EQUIVALENT: "#0969da",
                                  INCONCLUSIVE: "#6e7781", NOT_LEARNED: "#9a6700"}
# What a claim test's verdict says about the paper's claim (fusion_sweep.analysis.claims).
# Per claim test: SUPPORTS / CONTRADICTS / does not decide / not run; per claim (its tests
# tallied) also "mixed" (some tests support it, others contradict it).
SUPPORTS, CONTRADICTS, UNDECIDED, NOT_RUN, MIXED = (
    "SUPPORTS", "CONTRADICTS", "does not decide", "not run", "mixed")
# A test whose claimed arm cannot see token order, on a dataset whose label is order-only:
# the benchmark, not the model, decides it (claims.py).
NOT_TESTABLE = "not testable here (the label is order-only)"
SUPPORT_STATES: tuple[str, ...] = (SUPPORTS, CONTRADICTS, UNDECIDED, NOT_RUN, NOT_TESTABLE)
SUPPORT_COLORS: dict[str, str] = {SUPPORTS: "#1a7f37", CONTRADICTS: "#cf222e",
                                  UNDECIDED: "#6e7781", NOT_RUN: "#9a6700", MIXED: "#8250df",
                                  NOT_TESTABLE: "#57606a"}
# `claims` (top level): {"name", "title", "paper", "method", "alpha", "family_size",
# "tost_family_size", "claims": [CLAIM_KEYS], "tests": [CLAIM_TEST_KEYS]}.
CLAIM_SET_KEYS: tuple[str, ...] = (
    "name", "title", "paper", "method", "alpha", "family_size", "tost_family_size", "claims",
    "tests",
)
# One entry per claim of the paper: what it says, how the sweep tests it, the tally.
CLAIM_KEYS: tuple[str, ...] = (
    "claim", "title", "quote", "where", "operationalisation", "variants", "missing",
    "n_tests", "n_supports", "n_contradicts", "n_undecided", "support",
    # n_tests/n_supports/...: per TRAINING (a regime with its probes such as X-shuffled, which
    # re-test the same models, counts once); n_claim_tests: the claim tests themselves.
    "n_claim_tests",
)
# One entry per claim test (a claim is tested once per regime, or per cost metric).
#   estimate_kind: "mean difference" | "geometric-mean ratio" | "difference of mean
#   differences"; estimate/ci_*: in metric units (ratios: unitless); alternative:
#   "two-sided" or "greater" (one-sided in the claimed direction; ci_high is then null);
#   p: the test's p, p_holm: Holm over every claim test of the set; tost_*: equivalence
#   (accuracy claims with a margin), Holm over the set's TOST tests; learned: "yes"/"no"/
#   "unknown"/"n/a" per arm involved ("variant@dataset" -> state); verdict: VERDICTS or
#   "not run"; support: SUPPORT_STATES; missing: the arms or metric absent (not run);
#   dropped: seeds left out, [{"seed", "reason", "detail"}] (reasons: DROP_REASONS).
CLAIM_TEST_KEYS: tuple[str, ...] = (
    "claim", "test", "datasets", "metric", "arm", "reference", "contrast", "estimate_kind",
    "alternative", "n", "seeds", "deltas", "estimate", "ci_low", "ci_high", "p", "p_holm",
    "equivalence_margin", "tost_p", "tost_p_holm", "learned", "verdict", "support",
    "missing", "dropped", "notes",
)

DROP_REASONS: tuple[str, ...] = (
    "missing_trial", "failed_trial", "non_finite_metric", "duplicate_seed",
    "fingerprint_mismatch", "superseded_code", "code_mismatch", "platform_mismatch",
    # two different seeds of one arm with an identical seed-dependent fingerprint
    # (SEED_FP_COLUMNS): a copied run, not an independent replication; every copy is dropped
    "duplicate_fingerprint",
    # a row whose status cell is blank: not known to have finished (never read as FINISHED)
    "blank_status",
)
# Fingerprints that differ between two seeds of one arm by construction (batch order,
# initial weights, dropout stream): identical values on two seeds reveal a copied run. The
# split is left out: it depends on the dataset's data seed, not the trial seed, so every
# seed of a dataset shares it.
SEED_FP_COLUMNS: tuple[str, ...] = tuple(
    c for c in (*FP_COLUMNS, *ENCODER_FP_COLUMNS) if c != "fp_split")
# A fixed-n verdict at fewer pairs rests on the t-test's normality: the exact sign-flip and
# Wilcoxon tests cannot reach p < 0.05 below 5 pairs (2/2^n >= 0.0625), so nothing
# distribution-free backs it; the verdict says so beside it.
NORMALITY_BELOW_N = 5


class AnalysisError(UserError):
    """A bad input (file, column, flag value). The CLI prints it and exits 2."""

# Tidy-table columns by name: code reads df[DATASET], never df["dataset"].
DATASET, ENCODER, PE, FUSION, SEED = KEY_COLUMNS
# A results file without a `pe` column: every row's pe. Not the trial config's default pe
# (sinusoidal): unlike the encoder (every trial before the encoder axis ran the standard one),
# a file without the column says nothing about which positional encoding its trials used, and
# a real PE's name would match baselines and claims that name that PE (claims.py's
# standard/sinusoidal/add arm). Not "none" either: that is a PE (no positional encoding).
UNSPECIFIED_PE = "unspecified"
# Identity columns a results file may leave out, and the value every row then has.
COLUMN_DEFAULTS: dict[str, str] = {ENCODER: DEFAULT_ENCODER, PE: UNSPECIFIED_PE}
STATUS = META_COLUMNS[0]
# pairing.usable_values: one metric's value per usable trial.
VALUE = "value"
