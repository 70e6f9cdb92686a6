"""Trial configuration: one frozen dataclass, validated when built.

A trial is `(dataset, encoder, pe, fusion, seed)` plus its hyperparameters (README "One trial"). Names
are stored as strings and checked against the registries, so a config round-trips through YAML,
JSON, Ray Tune and MLflow params unchanged.

Where a hyperparameter's value comes from is one explicit chain, `resolve_hyperparameters`:
the dataset's defaults (its registry entry), then the search space's `all:` section, then the
space's section for the dataset, then the command line. The model and optimisation fields
have no dataclass default: a config built around the chain is an error, never a silent
default from another dataset. The encoders' and fusion operators' own options default on
their registry entries: a fusion operator declares its options once (`FusionOption`, in
models/fusion.py) and `fusion_option_fields` adds each as a field of `TrialConfig`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Mapping

from fusion_sweep.errors import UserError, choices, did_you_mean, unknown_name
from fusion_sweep.schema import (DEFAULT_ENCODER, IDENTITY_FIELDS, NON_SEMANTIC_FIELDS,
                                 trial_key, trial_label, variant_label)
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.models.common import ACTIVATIONS
from fusion_sweep.trial.models.encoder import ENCODERS
from fusion_sweep.trial.models.fusion import FUSION_OPTIONS, FUSIONS
from fusion_sweep.trial.models.positional import POSITIONAL, check_compatible
from fusion_sweep.trial.optim import OPTIMIZERS

DEVICES = ("auto", "cpu", "cuda")
# Arithmetic precision of a CUDA trial (the trainer applies it, the platform records it):
# fp32 = IEEE float32 matmuls; tf32 = TensorFloat-32 matmuls and convolutions on CUDA (10-bit
# mantissa inputs, fp32 accumulate; the same as fp32 on a CPU); bf16 = bfloat16 autocast of
# forward and loss (on CPU too), fp32 master weights, gradients and Adam state.
PRECISIONS = ("fp32", "tf32", "bf16")

# Marks a model/optimisation field that no layer of the hyperparameter chain set.
UNSET: Any = None
CHAIN_FIELDS = ("max_len", "d_model", "heads", "layers", "dim_ff", "dropout", "attn_dropout",
                "activation", "norm_first", "batch_size", "epochs",
                "optimizer", "lr", "weight_decay", "grad_clip", "patience", "min_delta")
# The last layer of the chain (`resolve_hyperparameters`), as `train --show-config` names it.
COMMAND_LINE = "command line"


class ConfigError(UserError):
    """An invalid trial config; `errors` lists every problem (one message each)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("invalid trial config:\n  " + "\n  ".join(self.errors))


def fusion_option_fields(cls: type) -> type:
    """Adds one field per fusion option (`FUSION_OPTIONS`: name, type and default as its
    operator declares them) to the class before `dataclass` reads its fields: an option is
    then a hyperparameter of every trial like any other field (its key, its MLflow params,
    `--override`, a search space's `hyperparameters:`), declared in models/fusion.py only."""
    for option in FUSION_OPTIONS.values():
        cls.__annotations__[option.name] = option.type
        setattr(cls, option.name, option.default)
    return cls


@dataclass(frozen=True)
@fusion_option_fields
class TrialConfig:
    """Everything one trial needs. Build with :meth:`build` to get dataset defaults. Besides
    the fields below, one field per fusion option (`fusion_option_fields`)."""

    dataset: str
    fusion: str = "add"
    pe: str = "sinusoidal"
    seed: int = 0
    # --- encoder body (models/encoder.py ENCODERS). The ReSSFormer fields below are read by
    # encoder "ressformer" only (models/ressformer.py documents each); every other encoder
    # requires them at these defaults, so a stray switch is an error, never silently ignored.
    encoder: str = DEFAULT_ENCODER
    soes: bool = True  # Self-Organizing Encoder Structure: content-only attention, no PE
    asam: bool = True  # Adaptive Sparse Attention: sparse activation, top-k keys, experts
    r2mu: bool = True  # Recurrent Reasoning & Memory Unit: one shared block T times + memory
    iterations: int = 3  # T, R2MU's recurrent steps
    topk: int = 8  # ASAM's keys per query; 0 = every key
    attn_activation: str = "entmax15"  # ASAM's attention activation
    experts: int = 1  # ASAM's lightweight attention experts; 1 = no routing
    experts_topk: int = 1  # experts each head is routed to
    memory_segments: int = 4  # R2MU's segment-level memory slots per document
    graph_reg: float = 0.01  # weight of SOES's attention-graph regulariser (eq. 8)
    # --- model (no defaults: every value comes through `resolve_hyperparameters`) ---
    max_len: int = UNSET
    d_model: int = UNSET
    heads: int = UNSET
    layers: int = UNSET
    dim_ff: int = UNSET
    dropout: float = UNSET
    # Attention-probability dropout. The reference (nn.TransformerEncoderLayer) ties it
    # to `dropout` (0.1). 0 lets CPU SDPA use its fused kernel instead of the math path.
    attn_dropout: float = UNSET
    activation: str = UNSET
    norm_first: bool = UNSET  # reference: nn.TransformerEncoderLayer default (post-norm)
    # --- optimisation ---
    batch_size: int = UNSET
    epochs: int = UNSET
    optimizer: str = UNSET
    lr: float = UNSET
    weight_decay: float = UNSET
    grad_clip: float = UNSET  # 0 disables clipping
    patience: int = UNSET  # 0 disables early stopping
    min_delta: float = UNSET
    # --- data ---
    data_seed: int = 0  # the split / synthetic generation; independent of `seed`
    data_dir: str = ""  # local copy of a real dataset ("" = Hugging Face hub)
    limit_train: int = 0  # 0 = all; else a deterministic subsample (by data_seed)
    limit_eval: int = 0
    # Changes a trial's numbers, so it is part of the trial key (not in NON_SEMANTIC_FIELDS).
    precision: str = "fp32"
    # --- execution (not part of the trial key) ---
    device: str = "auto"
    num_threads: int = 0  # 0 = torch default / the trial's CPU budget
    cache_dir: str = ""
    latency_repeats: int = 5
    save_checkpoint: bool = False
    # False during hyperparameter tuning: the trainer then never reads the test split.
    evaluate_test: bool = True

    def __post_init__(self) -> None:
        errors = self.validation_errors()
        if errors:
            raise ConfigError(errors)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, dataset: str, *, space_all: Mapping[str, Any] | None = None,
              space_dataset: Mapping[str, Any] | None = None, **overrides: Any) -> "TrialConfig":
        """The config at the end of the hyperparameter chain (`resolve_hyperparameters`);
        `overrides` are the last layer (the command line, the grid's identity fields)."""
        values, _ = resolve_hyperparameters(dataset, space_all=space_all,
                                            space_dataset=space_dataset, overrides=overrides)
        return cls(dataset=dataset, **coerce_fields(values))

    def replace(self, **changes: Any) -> "TrialConfig":
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise ValueError(_unknown_fields(unknown, self.field_names()))
        return dataclasses.replace(self, **coerce_fields(changes))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrialConfig":
        unknown = sorted(set(d) - set(cls.field_names()))
        if unknown:
            raise ValueError(_unknown_fields(unknown, cls.field_names()))
        return cls(**coerce_fields(dict(d)))

    @staticmethod
    def field_names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(TrialConfig))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hyperparameters(self) -> dict[str, Any]:
        """Every semantic field except the identity fields (the encoder's registry name and
        switches stay: the identity carries only their variant label) and the fields of the
        other encoders (at their defaults, read by nobody: a standard-encoder trial has no
        ReSSFormer switches). What a trial's MLflow run logs as params."""
        skip = (set(IDENTITY_FIELDS) - {"encoder"}) | set(NON_SEMANTIC_FIELDS) \
            | {f for name, e in ENCODERS.items() if name != self.encoder for f in e.OPTION_FIELDS}
        skip -= set(ENCODERS[self.encoder].OPTION_FIELDS)
        return {k: v for k, v in self.to_dict().items() if k not in skip}

    def encoder_variant(self) -> str:
        """The identity's `encoder`: the registry name plus its switches ("ressformer-no-asam")."""
        return ENCODERS[self.encoder].variant(self)

    def label_tags(self) -> dict[str, str]:
        """What the claims report needs to know about this trial's task and model, as MLflow
        tags (schema.LABEL_DEPENDS_TAG, schema.ORDER_ACCESS_TAG): what the dataset's label
        depends on (registry LABEL_DEPENDS), and how much token order the model can see:
        "none" (permutation-invariant), "segments" (ReSSFormer's R2MU: which tokens share a
        memory segment, no direction) or "tokens" (a positional encoding). And the registry's
        facts about the dataset's regime (schema.REGIME_TAG, PROBE_OF_TAG, LONG_CONTEXT_TAG,
        LENGTH_REGIME_TAG): the regime it trains (a probe's clean regime, `stream_name`), the
        regime a probe re-tests ("" for a clean regime), whether the regime is long-context,
        and the length regime it stands for in the fusion study ("" for a probe)."""
        from fusion_sweep.schema import (
            LABEL_DEPENDS_TAG, LENGTH_REGIME_TAG, LONG_CONTEXT_ABOVE_TOKENS, LONG_CONTEXT_TAG,
            ORDER_ACCESS_TAG, PROBE_OF_TAG, REGIME_TAG,
        )
        from fusion_sweep.trial.data.registry import DATASETS
        from fusion_sweep.trial.models.encoder import ENCODERS

        seen = ENCODERS[self.encoder].order_visibility(self)  # "no: ..." / "segment ..." / else
        access = "none" if seen.startswith("no") else "segments" if seen.startswith("segment") \
            else "tokens"
        spec = DATASETS[self.dataset]
        regime = spec.stream_name  # a structure-noise probe's clean regime, else its own name
        long = int(DATASETS[regime].defaults()["max_len"]) > LONG_CONTEXT_ABOVE_TOKENS
        return {LABEL_DEPENDS_TAG: spec.label_depends, ORDER_ACCESS_TAG: access,
                REGIME_TAG: regime, PROBE_OF_TAG: regime if regime != self.dataset else "",
                LONG_CONTEXT_TAG: "true" if long else "false",
                LENGTH_REGIME_TAG: spec.length_regime}

    def variant_label(self) -> str:
        """What a comparison compares within a dataset: "encoder/pe/fusion"."""
        return variant_label(self.identity())

    def describe(self) -> str:
        """One-line identity for messages: dataset/[encoder/]pe/fusion/seed N (the encoder
        variant shown unless it is the default encoder), as the launch's progress lines."""
        return trial_label(self.identity())

    def identity(self) -> dict[str, Any]:
        """The trial's identity (`schema.IDENTITY_FIELDS`), encoder as its variant label."""
        values = {**self.to_dict(), "encoder": self.encoder_variant()}
        return {k: values[k] for k in IDENTITY_FIELDS}

    def trial_key(self, code: str) -> str:
        """sha(identity, hyperparameters, code fingerprint): see `fusion_sweep.schema.trial_key`."""
        return trial_key(self.to_dict(), code)

    # ---------------------------------------------------------------- validation
    def validation_errors(self) -> list[str]:
        """All problems at once, each naming the field and the valid choices."""
        errs: list[str] = [
            f"{name} is not set: build trial configs with TrialConfig.build(dataset, ...), whose "
            f"hyperparameter chain starts from the dataset's defaults"
            for name in CHAIN_FIELDS if getattr(self, name) is UNSET]
        if errs:
            return errs

        def choice(name: str, value: Any, options: Any) -> None:
            if value not in options:
                errs.append(unknown_name(name, value, sorted(options)))

        choice("dataset", self.dataset, DATASETS)
        choice("encoder", self.encoder, ENCODERS)
        choice("fusion", self.fusion, FUSIONS)
        choice("pe", self.pe, POSITIONAL)
        choice("optimizer", self.optimizer, OPTIMIZERS)
        choice("activation", self.activation, ACTIVATIONS)
        choice("device", self.device, DEVICES)
        choice("precision", self.precision, PRECISIONS)
        for name in ("max_len", "d_model", "heads", "layers", "dim_ff", "batch_size", "epochs",
                     "latency_repeats"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                errs.append(f"{name} must be a positive integer, got {v!r}")
        for name in ("limit_train", "limit_eval", "patience", "num_threads", "seed", "data_seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                errs.append(f"{name} must be a non-negative integer, got {v!r}")
        for name in ("dropout", "attn_dropout"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                errs.append(f"{name} must be in [0, 1), got {v!r}")
        if not isinstance(self.lr, (int, float)) or self.lr <= 0:
            errs.append(f"lr must be positive, got {self.lr!r}")
        for name in ("weight_decay", "grad_clip", "min_delta"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v < 0:
                errs.append(f"{name} must be non-negative, got {v!r}")
        if isinstance(self.d_model, int) and isinstance(self.heads, int) and self.heads > 0:
            if self.d_model % self.heads:
                errs.append(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        # Every trial holds every fusion operator's options: each is checked as declared.
        for option in FUSION_OPTIONS.values():
            errs.extend(option.config_errors(self))
        # Each registry entry owns its own rules (gate-cnn's kernel, rotary's head dim, a
        # synthetic regime's longest document): adding one touches its registry file only.
        if self.fusion in FUSIONS:
            errs.extend(FUSIONS[self.fusion].config_errors(self))
        if self.pe in POSITIONAL:
            errs.extend(POSITIONAL[self.pe].config_errors(self))
        if self.dataset in DATASETS:
            errs.extend(DATASETS[self.dataset].config_errors(self))
        if self.encoder in ENCODERS:
            errs.extend(ENCODERS[self.encoder].config_errors(self))
        if self.fusion in FUSIONS and self.pe in POSITIONAL:
            problem = check_compatible(self.pe, self.fusion)
            if problem:
                errs.append(problem)
        return errs


def _unknown_fields(unknown: list[str], names: Any, where: str = "") -> str:
    """`unknown trial config field(s) 'lrr' (did you mean 'lr'?) (command line); choose from ...`"""
    named = ", ".join(f"{k!r}{did_you_mean(k, names)}" for k in unknown)
    return f"unknown trial config field(s) {named}{where}; choose from {choices(sorted(names))}"


def resolve_hyperparameters(dataset: str, *, space_all: Mapping[str, Any] | None = None,
                            space_dataset: Mapping[str, Any] | None = None,
                            overrides: Mapping[str, Any] | None = None,
                            ) -> tuple[dict[str, Any], dict[str, str]]:
    """The one hyperparameter chain -> (values, the layer each value came from).

    Layers, later wins: the dataset's defaults (`DatasetSpec.defaults()`), the search space's
    `all:` section, the space's section for this dataset, then `overrides` (the command line,
    or the sweep's grid point). Fields no layer sets keep their built-in default (the
    execution fields: device, threads, cache, ...; the encoders' and fusion operators' own
    options, as their registry entries declare them), reported as "built-in".
    """
    if dataset not in DATASETS:
        raise UserError(unknown_name("dataset", dataset, sorted(DATASETS)))
    names = TrialConfig.field_names()
    values: dict[str, Any] = {}
    sources: dict[str, str] = {f: "built-in" for f in names if f != "dataset"}
    layers = (("dataset defaults", DATASETS[dataset].defaults()),
              ("space all:", space_all or {}),
              (f"space {dataset}:", space_dataset or {}),
              (COMMAND_LINE, overrides or {}))
    for layer, given in layers:
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise UserError(_unknown_fields(unknown, names, f" ({layer})"))
        for k, v in given.items():
            values[k] = v
            sources[k] = layer
    values.pop("dataset", None)
    return values, sources


_FIELD_TYPES: dict[str, type] = {}


def _field_types() -> dict[str, type]:
    if not _FIELD_TYPES:
        for f in fields(TrialConfig):
            t = f.type if isinstance(f.type, type) else {"int": int, "float": float, "str": str,
                                                         "bool": bool}[str(f.type)]
            _FIELD_TYPES[f.name] = t
    return _FIELD_TYPES


def coerce_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """Coerce strings (CLI `--override k=v`, MLflow params) and ints-as-floats to field types.

    Values that cannot be coerced are passed through so validation names the field.
    """
    types = _field_types()
    out: dict[str, Any] = {}
    for k, v in d.items():
        t = types.get(k)
        out[k] = _coerce(v, t) if t is not None else v
    return out


def _coerce(v: Any, t: type) -> Any:
    try:
        if t is bool:
            if isinstance(v, str):
                low = v.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                return v
            return bool(v) if isinstance(v, (int, bool)) else v
        if t is int:
            if isinstance(v, bool):
                return v
            if isinstance(v, str):
                return int(float(v)) if float(v).is_integer() else v
            if isinstance(v, float) and v.is_integer():
                return int(v)
            return v
        if t is float:
            if isinstance(v, bool):
                return v
            if isinstance(v, (int, str)):
                return float(v)
            return v
        if t is str:
            return v if isinstance(v, str) else str(v)
    except (TypeError, ValueError):
        return v
    return v
