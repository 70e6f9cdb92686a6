"""Dataset registry: name -> DatasetSpec. The only place dataset names are listed.

Each entry carries its own hyperparameter defaults (`DatasetSpec.defaults()`): a reference
set from the paper's code plus the entry's own overrides. They are the first layer of the one
hyperparameter chain, `fusion_sweep.trial.config.resolve_hyperparameters`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The paper's reference code, per dataset family. Every model and optimisation field of a
# trial config is here, so no value ever comes from a dataclass default.
REFERENCE_HPARAMS: dict[str, dict[str, Any]] = {
    "agnews-imdb": dict(
        max_len=512, d_model=256, heads=8, layers=4, dim_ff=1024, dropout=0.1,
        attn_dropout=0.1, activation="gelu", norm_first=False, gate_cnn_kernel=5,
        batch_size=64, epochs=20, optimizer="adamw", lr=3e-4, weight_decay=0.0, grad_clip=1.0,
        patience=0, min_delta=1e-4,
    ),
    "arxiv": dict(
        max_len=4096, d_model=128, heads=8, layers=2, dim_ff=256, dropout=0.1,
        attn_dropout=0.1, activation="relu", norm_first=False, gate_cnn_kernel=5,
        batch_size=64, epochs=20, optimizer="adam", lr=3e-4, weight_decay=0.0, grad_clip=0.0,
        patience=4, min_delta=1e-4,
    ),
}


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    num_classes: int
    kind: str  # "hub" (Hugging Face / local copy) or "synthetic"
    reference: str  # its reference hyperparameters: a key of REFERENCE_HPARAMS
    hparam_overrides: dict[str, Any] = field(default_factory=dict)
    # hub datasets
    hf_path: str = ""
    text_field: str = "text"
    label_field: str = "label"
    # how validation is made: "from-train" = seeded 10% of train; "split" = the hub's split
    val_split: str = "from-train"
    # synthetic datasets: generator parameters (see data/synthetic.py)
    synthetic: dict[str, Any] = field(default_factory=dict)
    # hub datasets: the config ("subset") name; "" = the hub's default config
    hf_config: str = ""

    def defaults(self) -> dict[str, Any]:
        """This dataset's hyperparameters: its reference set, then its own overrides."""
        return {**REFERENCE_HPARAMS[self.reference], **self.hparam_overrides}

    @property
    def generated(self) -> bool:
        """True for the built-in synthetic regimes (made from data_seed, never downloaded)."""
        return self.kind == "synthetic"

    @property
    def stream_name(self) -> str:
        """Name the generator's and the trainer's random streams are derived from: the clean
        regime of a structure-noise probe (`synthetic.base`), else this dataset's own."""
        return str(self.synthetic.get("base") or self.name)

    def longest_document(self) -> int:
        """Hard cap on a document's token count (generated datasets), else 0 (unknown)."""
        return int(self.synthetic.get("max_len", 0)) if self.generated else 0

    def config_errors(self, config: Any) -> list[str]:
        """Problems of a trial config that only this dataset has (each naming the field)."""
        cap = self.longest_document()
        if isinstance(config.max_len, int) and 0 < config.max_len < cap:
            # Truncation would cut the last marker, whose identity depends on the class: a
            # position-free model could then beat chance and the benchmark would lie.
            return [f"max_len ({config.max_len}) is below {self.name}'s longest document ({cap} "
                    f"tokens); truncating a synthetic document drops a class-dependent marker, "
                    f"so use max_len >= {cap}"]
        return []


# Small model shared by the synthetic regimes, identical in every regime so that the regimes
# differ only in their documents (benchmarks/learning_curve.py compares them with this model).
# Every choice was measured at 1 thread per trial, 2 trials at once, on the 2-core reference
# machine (issue 9 §1); the default sweep must fit in ~850 trial-seconds.
# - 1 encoder layer of width 32 (2 heads, dim_ff 64): about 7-9 us per training token, half of
#   the 2-layer model's, and it escapes the plateau at chance in as few steps; at long lengths
#   attention (L^2) is ~60% of a step. The d=64, 2-layer model stayed at chance on the medium
#   and long regimes within any budget that fits the default sweep.
# - batch 64, lr 3e-3: learning starts with a plateau at chance whose length is set by gradient
#   noise; batch 64 left it in all measured seeds, batch 16-32 often not within 300 steps, and
#   lr 1e-3 / 5e-3 / 1e-2 were no faster. Per-step overhead is negligible here (cost per token
#   is flat in batch size), so a larger batch buys nothing further.
# - adam, relu, no clipping (the ArXiv reference's optimiser; with weight_decay 0 adam and
#   adamw are the same); dropout 0: plentiful fresh synthetic data needs no regulariser, it
#   saves ~20% of a step, and left-the-plateau times were the same with 0.1. attn_dropout 0
#   lets CPU SDPA take its fused kernel.
# - patience 0: accuracy sits at chance for a while before order is picked up, so early
#   stopping would cut learning off; latency_repeats 1: latency is not a question the synthetic
#   benchmark asks, and each repeat is a pass over 4 evaluation batches.
# The reference architecture is unchanged: E scaled by sqrt(d), post-norm, mean pooling.
_SYNTH_MODEL: dict[str, Any] = dict(
    d_model=32, heads=2, layers=1, dim_ff=64, dropout=0.0, attn_dropout=0.0, activation="relu",
    norm_first=False, optimizer="adam", lr=3e-3, weight_decay=0.0, grad_clip=0.0,
    batch_size=64, patience=0, min_delta=1e-4, latency_repeats=1)

# Generator parameters (data/synthetic.py). max_len is a hard cap on document length and each
# regime's max_len hyperparameter equals it: truncation would drop a class-dependent marker and
# let a position-free model beat chance. Lengths are log-normal (median, sigma) clipped to
# [min_len, max_len]; the caps sit >= 3.5 sigma out, so almost no document is clipped.
# The task is the SAME in every regime, so that length is what makes a regime hard:
# - 2 classes = which of two markers comes first; each marker is a run of 8 identical tokens
#   (`marker_run`: a key phrase rather than one token in hundreds; the bag of tokens is still
#   identical in both classes). The informative share of a document, and the markers' share of
#   the mean-pooled representation, is 16/L: 44% / 12.5% / 5%. With single-token markers (and
#   with runs of 4) the long regime stayed at chance in some seeds within any affordable budget.
# - the same narrow length spread (sigma 0.15) everywhere: spread is a difficulty of its own
#   (a marker's absolute position tells less about the order when L varies), measured large
#   enough that a sigma-0.15 long regime learned as fast per step as a sigma-0.3 medium one.
# Measured with the model above (benchmarks/learning_curve.py, concat, 3 seeds): validation
# accuracy first >= 0.75 after a median of 38 / 100 / 138 steps (short / medium / long), i.e.
# 0.09 / 0.83 / 2.9 M training tokens.
#   short  ~ AG News in length (median 36 tokens; AG News ~38 words). Binary, not 4-way: a
#            3-marker, 4-class short regime needed MORE steps than a binary long one, so length
#            would not be what makes a regime hard. Easy by design: near ceiling for concat.
#   medium ~ IMDB: binary, median 128 tokens (IMDB's 174 scaled down).
#   long   ~ ArXiv scaled down: median 320 tokens, narrow spread (most ArXiv papers hit the
#            reference's 4096-token cap). Binary: an 11-way order needs 4 markers and stayed at
#            chance. 320, not 384: at median 384 the 5-seed concat mean at ~200 steps came out
#            0.68-0.87 depending on the draw (~0.75 target), and more steps do not fit the
#            budget (attention, ~60% of a long step, grows with L); at 320 it was 0.97.
# Training data per regime: enough steps to leave the plateau at chance in every measured seed
# with margin (short 4 x 38 = 152 steps, medium 4 x 50 = 200, long 3 x 75 = 225), few enough
# that the default sweep fits its budget: ~2 / ~10 / ~37 trial-seconds, ~740 s for the 45
# trials. Documents are seen 3-4 times rather than once so that validation (best-epoch
# selection) is read 3-4 times. n_test 500: +-0.02 binomial SD at 80% accuracy, and the pe=none
# check at chance has a 4-sigma band of +-0.09.
_SYNTH_COMMON: dict[str, Any] = dict(n_val=300, n_test=500, len_sigma=0.15, filler_vocab=500,
                                     zipf_s=1.1, marker_run=8)
_SYNTH_SHORT: dict[str, Any] = dict(_SYNTH_COMMON, n_train=2400, len_median=36, min_len=20,
                                    max_len=80)
_SYNTH_MEDIUM: dict[str, Any] = dict(_SYNTH_COMMON, n_train=3200, len_median=128, min_len=64,
                                     max_len=256)
_SYNTH_LONG: dict[str, Any] = dict(_SYNTH_COMMON, n_train=4800, len_median=320, min_len=160,
                                   max_len=540)

DATASETS: dict[str, DatasetSpec] = {
    # fancyzhx/ag_news: columns text,label; splits train (120k) / test (7.6k); val = 10% of train.
    "agnews": DatasetSpec("agnews", 4, "hub", "agnews-imdb", hf_path="fancyzhx/ag_news"),
    # stanfordnlp/imdb: columns text,label; splits train / test / unsupervised (label -1, unused).
    # No validation split, so (like AG News) val = a seeded 10% of train; test stays untouched.
    "imdb": DatasetSpec("imdb", 2, "hub", "agnews-imdb", hf_path="stanfordnlp/imdb"),
    # ccdv/arxiv-classification: columns text,label; splits train (28k) / validation / test
    # (2.5k each). Config "" = "default", as the reference code loaded it; the "no_ref" config
    # removes in-text class references such as "[cs.LG]".
    "arxiv": DatasetSpec("arxiv", 11, "hub", "arxiv", hf_path="ccdv/arxiv-classification",
                         val_split="split"),
    # Epochs: short 4 x 38 steps, medium 4 x 50, long 3 x 75 (batch 64); see above.
    "synthetic-short": DatasetSpec("synthetic-short", 2, "synthetic", "agnews-imdb",
                                   hparam_overrides={**_SYNTH_MODEL, "max_len": 80, "epochs": 4},
                                   synthetic=_SYNTH_SHORT),
    "synthetic-medium": DatasetSpec("synthetic-medium", 2, "synthetic", "agnews-imdb",
                                    hparam_overrides={**_SYNTH_MODEL, "max_len": 256, "epochs": 4},
                                    synthetic=_SYNTH_MEDIUM),
    "synthetic-long": DatasetSpec("synthetic-long", 2, "synthetic", "arxiv",
                                  hparam_overrides={**_SYNTH_MODEL, "max_len": 540, "epochs": 3},
                                  synthetic=_SYNTH_LONG),
}


# Structure-noise probes (ReSSFormer's ShuffledWiki counterpart, data/synthetic.py): each clean
# regime's own documents and model, its TEST documents cut into 8 segments and permuted with the
# markers' relative order (the label) intact. Training is identical to the clean regime's, so a
# model's clean-vs-shuffled gap is its sensitivity to structure noise at test time.
SHUFFLE_SEGMENTS = 8
for _clean in ("synthetic-short", "synthetic-medium", "synthetic-long"):
    _spec = DATASETS[_clean]
    DATASETS[f"{_clean}-shuffled"] = DatasetSpec(
        f"{_clean}-shuffled", _spec.num_classes, "synthetic", _spec.reference,
        hparam_overrides=dict(_spec.hparam_overrides),
        synthetic={**_spec.synthetic, "shuffle_segments": SHUFFLE_SEGMENTS, "base": _clean})


def get_spec(name: str) -> DatasetSpec:
    """The registry entry, or a ValueError naming the valid choices."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from {sorted(DATASETS)}")
    return DATASETS[name]
