"""Trial configuration: one frozen dataclass, validated when built.

A trial is `(dataset, pe, fusion, seed)` plus the dataset's fixed hyperparameters
(README "One trial"). Names are stored as strings and checked against the registries, so a
config round-trips through YAML, JSON, Ray Tune and MLflow params unchanged.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Mapping

from fusion_sweep.schema import IDENTITY_FIELDS, NON_SEMANTIC_FIELDS

# Hyperparameter families from the paper's reference code (README "One trial").
# "short" = AG News / IMDB, "long" = ArXiv. Each dataset names its family.
HPARAM_FAMILIES: dict[str, dict[str, Any]] = {
    "short": dict(
        max_len=512, d_model=256, heads=8, layers=4, dim_ff=1024, dropout=0.1,
        attn_dropout=0.1, activation="gelu", batch_size=64, epochs=20, optimizer="adamw",
        lr=3e-4, weight_decay=0.0, grad_clip=1.0, patience=0, min_delta=1e-4,
    ),
    "long": dict(
        max_len=4096, d_model=128, heads=8, layers=2, dim_ff=256, dropout=0.1,
        attn_dropout=0.1, activation="relu", batch_size=64, epochs=20, optimizer="adam",
        lr=3e-4, weight_decay=0.0, grad_clip=0.0, patience=4, min_delta=1e-4,
    ),
}

DEVICES = ("auto", "cpu", "cuda")



class ConfigError(ValueError):
    """An invalid trial config; `errors` lists every problem (one message each)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("invalid trial config:\n  " + "\n  ".join(self.errors))


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs. Build with :meth:`build` to get dataset defaults."""

    dataset: str
    fusion: str = "add"
    pe: str = "sinusoidal"
    seed: int = 0
    # --- model ---
    max_len: int = 512
    d_model: int = 256
    heads: int = 8
    layers: int = 4
    dim_ff: int = 1024
    dropout: float = 0.1
    # Attention-probability dropout. The reference (nn.TransformerEncoderLayer) ties it
    # to `dropout` (0.1). 0 lets CPU SDPA use its fused kernel instead of the math path.
    attn_dropout: float = 0.1
    activation: str = "gelu"
    norm_first: bool = False  # reference: nn.TransformerEncoderLayer default (post-norm)
    gate_cnn_kernel: int = 5
    # --- optimisation ---
    batch_size: int = 64
    epochs: int = 20
    optimizer: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # 0 disables clipping
    patience: int = 0  # 0 disables early stopping
    min_delta: float = 1e-4
    # --- data ---
    data_seed: int = 0  # the split / synthetic generation; independent of `seed`
    data_dir: str = ""  # local copy of a real dataset ("" = Hugging Face hub)
    limit_train: int = 0  # 0 = all; else a deterministic subsample (by data_seed)
    limit_eval: int = 0
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
    def build(cls, dataset: str, **overrides: Any) -> "TrialConfig":
        """Dataset defaults (its hyperparameter family), then `overrides`."""
        from fusion_sweep.data.registry import DATASETS

        unknown = sorted(set(overrides) - set(cls.field_names()))
        if unknown:
            raise ValueError(
                f"unknown trial config field(s) {unknown}; choose from {sorted(cls.field_names())}"
            )
        if dataset not in DATASETS:
            raise ValueError(f"unknown dataset {dataset!r}; choose from {sorted(DATASETS)}")
        base = dict(dataset_defaults(dataset))
        base.update(overrides)
        return cls(dataset=dataset, **coerce_fields(base))

    def replace(self, **changes: Any) -> "TrialConfig":
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise ValueError(
                f"unknown trial config field(s) {unknown}; choose from {sorted(self.field_names())}"
            )
        return dataclasses.replace(self, **coerce_fields(changes))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrialConfig":
        unknown = sorted(set(d) - set(cls.field_names()))
        if unknown:
            raise ValueError(
                f"unknown trial config field(s) {unknown}; choose from {sorted(cls.field_names())}"
            )
        return cls(**coerce_fields(dict(d)))

    @staticmethod
    def field_names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(TrialConfig))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hyperparameters(self) -> dict[str, Any]:
        """Every semantic field except the identity fields."""
        skip = set(IDENTITY_FIELDS) | set(NON_SEMANTIC_FIELDS)
        return {k: v for k, v in self.to_dict().items() if k not in skip}

    def trial_key(self, code: str) -> str:
        """sha(identity, hyperparameters, code fingerprint): see `fusion_sweep.schema.trial_key`."""
        from fusion_sweep.schema import trial_key

        return trial_key(self.to_dict(), code)

    # ---------------------------------------------------------------- validation
    def validation_errors(self) -> list[str]:
        """All problems at once, each naming the field and the valid choices."""
        from fusion_sweep.data.registry import DATASETS
        from fusion_sweep.models.encoder import ACTIVATIONS
        from fusion_sweep.models.fusion import FUSIONS
        from fusion_sweep.models.positional import POSITIONAL, check_compatible
        from fusion_sweep.trainer import OPTIMIZERS

        errs: list[str] = []

        def choice(name: str, value: Any, options: Any) -> None:
            if value not in options:
                errs.append(f"unknown {name} {value!r}; choose from {sorted(options)}")

        choice("dataset", self.dataset, DATASETS)
        choice("fusion", self.fusion, FUSIONS)
        choice("pe", self.pe, POSITIONAL)
        choice("optimizer", self.optimizer, OPTIMIZERS)
        choice("activation", self.activation, ACTIVATIONS)
        choice("device", self.device, DEVICES)
        for name in ("max_len", "d_model", "heads", "layers", "dim_ff", "batch_size", "epochs",
                     "gate_cnn_kernel", "latency_repeats"):
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
        # Each registry entry owns its own rules (gate-cnn's kernel, rotary's head dim, a
        # synthetic regime's longest document): adding one touches its registry file only.
        if self.fusion in FUSIONS:
            errs.extend(FUSIONS[self.fusion].config_errors(self))
        if self.pe in POSITIONAL:
            errs.extend(POSITIONAL[self.pe].config_errors(self))
        if self.dataset in DATASETS:
            errs.extend(DATASETS[self.dataset].config_errors(self))
        if self.fusion in FUSIONS and self.pe in POSITIONAL:
            problem = check_compatible(self.pe, self.fusion)
            if problem:
                errs.append(problem)
        return errs


def dataset_defaults(dataset: str) -> dict[str, Any]:
    """The dataset's hyperparameter family merged with its own overrides."""
    from fusion_sweep.data.registry import DATASETS

    spec = DATASETS[dataset]
    out = dict(HPARAM_FAMILIES[spec.hparams])
    out.update(spec.hparam_overrides)
    return out


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
