"""Dataset registry: name -> DatasetSpec. The only place dataset names are listed.

Each entry carries its own hyperparameter defaults (`DatasetSpec.defaults()`): a reference
set from the paper's code plus the entry's own overrides. They are the first layer of the one
hyperparameter chain, `fusion_sweep.config.resolve_hyperparameters`.
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


# Small model shared by the synthetic regimes (measured on the 2-core reference machine, 1
# thread per trial): one encoder layer of width 32 learns marker order in a few hundred steps,
# where the earlier d=64, 2-layer model stayed at chance on the medium and long regimes within
# any budget that fits the 10-minute default sweep. lr 3e-3 and batch 64 shorten the plateau
# at chance that precedes learning; attn_dropout 0 lets CPU SDPA take its fused kernel. The
# reference architecture is unchanged (E scaled by sqrt(d), post-norm, mean pooling).
_SYNTH_MODEL: dict[str, Any] = dict(d_model=32, heads=2, layers=1, dim_ff=64, batch_size=64,
                                    lr=3e-3, attn_dropout=0.0, patience=0, latency_repeats=3)

# Generator parameters (data/synthetic.py). max_len is a hard cap on document length and each
# regime's max_len hyperparameter equals it: truncation would drop a class-dependent marker and
# let a position-free model beat chance. Lengths are log-normal (median, sigma) clipped to
# [min_len, max_len]. Each marker is a run of 4 identical tokens (`marker_run`): the order is
# still the only label signal (the bag of tokens is the same in every class), but a marker is a
# short phrase, as in real text, rather than one token in hundreds.
#   short  ~ AG News: 4 classes (3 markers), median 36 tokens;
#   medium ~ IMDB: 2 classes, median 128 tokens;
#   long   ~ ArXiv scaled down: 2 classes (11-way order needs 4 markers and far more steps than
#            the default budget has), median 256 tokens.
# Every regime trains the same number of samples per epoch (6,400 = 100 steps of 64), so a
# longer regime is harder per step: benchmarks/learning_curve.py measures it.
_SYNTH_COMMON: dict[str, Any] = dict(n_train=6400, n_val=300, n_test=300, filler_vocab=500,
                                     zipf_s=1.1, marker_run=4)
_SYNTH_SHORT: dict[str, Any] = dict(_SYNTH_COMMON, len_median=36, len_sigma=0.3, min_len=16,
                                    max_len=80)
_SYNTH_MEDIUM: dict[str, Any] = dict(_SYNTH_COMMON, len_median=128, len_sigma=0.3, min_len=48,
                                     max_len=320)
_SYNTH_LONG: dict[str, Any] = dict(_SYNTH_COMMON, len_median=256, len_sigma=0.2, min_len=128,
                                   max_len=512)

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
    # patience 0 everywhere: accuracy plateaus at chance before order is picked up, so early
    # stopping would cut learning off.
    "synthetic-short": DatasetSpec("synthetic-short", 4, "synthetic", "agnews-imdb",
                                   hparam_overrides={**_SYNTH_MODEL, "max_len": 80, "epochs": 4},
                                   synthetic=_SYNTH_SHORT),
    "synthetic-medium": DatasetSpec("synthetic-medium", 2, "synthetic", "agnews-imdb",
                                    hparam_overrides={**_SYNTH_MODEL, "max_len": 320, "epochs": 2},
                                    synthetic=_SYNTH_MEDIUM),
    "synthetic-long": DatasetSpec("synthetic-long", 2, "synthetic", "arxiv",
                                  hparam_overrides={**_SYNTH_MODEL, "max_len": 512, "epochs": 2},
                                  synthetic=_SYNTH_LONG),
}


def get_spec(name: str) -> DatasetSpec:
    """The registry entry, or a ValueError naming the valid choices."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from {sorted(DATASETS)}")
    return DATASETS[name]
