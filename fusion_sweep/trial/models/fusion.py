"""Fusion operators: how token embeddings E and positional encodings P become the input H.

Every operator maps `(E, P, mask) -> H`, with
    E:    (B, L, d)  token embeddings, already scaled by sqrt(d)
    P:    (1, L, d)  positional encodings (the same for every document)
    mask: (B, L)     True at real tokens, False at right-padding
    H:    (B, L, d)

Paper §3.2–3.3 and the reference code (README "Fusion operators"). Fusion-specific parameters
live in these modules only, so the trainer can initialise them from their own generator. Each
operator carries its own rules: `accepts_absent_p` (whether it has a meaning when the PE
produces no P, see positional.check_compatible), `OPTIONS` (its own hyperparameters, declared
once: `FusionOption`), `config_errors` (its constraints on the trial config) and
`activation_floats` (what it adds to the GPU memory estimate), so adding an operator touches
this file only.

An option is a trial-config field of its own: `TrialConfig` adds one field per declared
option (`FUSION_OPTIONS`), validates every option of every operator (each trial holds them
all, as its key and MLflow params do), and the classifier passes an operator its own options
(`Fusion.options(config)`, then `build_fusion`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.errors import choices, unknown_name

# What a value of an option's type is called in its error message.
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class FusionOption:
    """One hyperparameter an operator reads, declared on the operator only: the trial-config
    field `name` (TrialConfig adds it), its `type`, its `default` (the value every trial has
    unless the dataset's entry, the search space or the command line sets it) and an optional
    inclusive lower bound. Rules that involve other fields are the operator's `config_errors`."""

    name: str
    type: type
    default: Any
    minimum: int | float | None = None
    help: str = ""  # one line: what the option changes (docs/models.md says more)

    def config_errors(self, config: Any) -> list[str]:
        """The option's value in `config` of another type or below the bound: one message."""
        v = getattr(config, self.name)
        # a bool is an int to Python, never to a config; an int is a fine float
        wanted = (int, float) if self.type is float else self.type
        of_type = isinstance(v, wanted) and (self.type is bool or not isinstance(v, bool))
        if of_type and (self.minimum is None or v >= self.minimum):
            return []
        bound = "" if self.minimum is None else f" >= {self.minimum}"
        return [f"{self.name} must be {_TYPE_WORDS.get(self.type, self.type.__name__)}{bound}, "
                f"got {v!r}"]


class Fusion(nn.Module):
    """Base class."""

    # True where the operator still means something when a PE produces no P (attention-level
    # families, `none`): then H = op(E, 0). Only `add` (H = E) qualifies; others would compute
    # something other than what their name says.
    accepts_absent_p = False
    # Its own hyperparameters: the constructor takes d_model and one keyword per option.
    OPTIONS: tuple[FusionOption, ...] = ()

    @classmethod
    def options(cls, config: Any) -> dict[str, Any]:
        """Its options' values in `config` (what its constructor takes besides d_model)."""
        return {o.name: getattr(config, o.name) for o in cls.OPTIONS}

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        """Problems of a trial config that only this operator has (each naming the field)."""
        return []

    @classmethod
    def activation_floats(cls, config: Any, B: int, L: int) -> int:
        """Elements the operator saves for the backward beyond E and P, for the GPU memory
        estimate (trial/memory.py): widening or gating keeps 3 (B, L, d) tensors."""
        return 3 * B * L * int(config.d_model)

    def forward(self, E: torch.Tensor, P: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class AddFusion(Fusion):
    """H = E + P  (paper eq. 1; no parameters)."""

    accepts_absent_p = True

    @classmethod
    def activation_floats(cls, config: Any, B: int, L: int) -> int:
        return 0  # the sum keeps nothing for its backward

    def __init__(self, d_model: int) -> None:
        super().__init__()

    def forward(self, E, P, mask):
        return E + P


class ConcatFusion(Fusion):
    """H = W [E; P] + b,  W ∈ R^{d×2d}  (paper eq. 2; nn.Linear(2d, d) as in the reference)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(2 * d_model, d_model)

    def forward(self, E, P, mask):
        return self.proj(torch.cat([E, P.expand_as(E)], dim=-1))


class GateScalarFusion(Fusion):
    """g_i = σ(wᵀ[E_i; P_i] + b) — one scalar per position;  H_i = g_i E_i + (1 − g_i) P_i.

    Paper eq. 3–4 (Gate-Scalar); the ArXiv reference code's `nn.Linear(2d, 1)` gate.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.gate = nn.Linear(2 * d_model, 1)

    def forward(self, E, P, mask):
        P = P.expand_as(E)
        g = torch.sigmoid(self.gate(torch.cat([E, P], dim=-1)))  # (B, L, 1)
        return g * E + (1.0 - g) * P


class GateVectorFusion(Fusion):
    """g_i = σ(W[E_i; P_i] + b) ∈ (0,1)^d, W ∈ R^{d×2d};  H_i = g_i ⊙ E_i + (1 − g_i) ⊙ P_i.

    The AG News / IMDB reference code's "gate" (feature-wise, despite its name).
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.gate = nn.Linear(2 * d_model, d_model)

    def forward(self, E, P, mask):
        P = P.expand_as(E)
        g = torch.sigmoid(self.gate(torch.cat([E, P], dim=-1)))  # (B, L, d)
        return g * E + (1.0 - g) * P


class GateMLPFusion(Fusion):
    """g_i = σ(W₂ ReLU(W₁[E_i; P_i] + b₁) + b₂) ∈ (0,1)^d;  H_i = g_i ⊙ E_i + (1 − g_i) ⊙ P_i.

    The paper's "MLP-Gate" (Table 3): a feature-wise gate from a 2-layer MLP (2d→d→d).
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2 * d_model, d_model)
        self.fc2 = nn.Linear(d_model, d_model)

    def forward(self, E, P, mask):
        P = P.expand_as(E)
        g = torch.sigmoid(self.fc2(F.relu(self.fc1(torch.cat([E, P], dim=-1)))))  # (B, L, d)
        return g * E + (1.0 - g) * P


class MLPFusion(Fusion):
    """H = W₂ ReLU(W₁[E; P] + b₁) + b₂  (2d→d→d): what the reference code's "mlp" computes."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2 * d_model, d_model)
        self.fc2 = nn.Linear(d_model, d_model)

    def forward(self, E, P, mask):
        return self.fc2(F.relu(self.fc1(torch.cat([E, P.expand_as(E)], dim=-1))))


class GateCNNFusion(Fusion):
    """g_i = σ(mean_c(Σ_{k=-K..K} w_k ⊙ P_{i+k})_c + b);  H_i = g_i E_i + (1 − g_i) P_i.

    Paper eq. 5–6 (Gate-CNN): a depth-wise Conv1d of width 2K+1 over P only. The paper leaves
    the reduction of the d-dimensional conv output to a scalar unspecified; we take the MEAN
    over the d features plus one learned scalar bias b (a sum would scale the pre-activation
    with d and saturate the sigmoid at init).

    P at padding positions is zeroed before the convolution: otherwise the last K real tokens
    would see "positions" that exist only because their batch was padded, and a document's
    output would depend on its batch-mates (breaks dynamic padding).
    """

    OPTIONS = (FusionOption("gate_cnn_kernel", int, 5, minimum=1,
                            help="the convolution's width 2K+1 (odd, at most max_len)"),)

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        k, max_len = config.gate_cnn_kernel, config.max_len
        if not isinstance(k, int) or isinstance(k, bool):
            return []  # its declaration's type check names it
        errs = []
        if k >= 1 and k % 2 == 0:  # k < 1: its declaration's lower bound names it
            errs.append(f"gate_cnn_kernel must be odd (2K+1), got {k}")
        if isinstance(max_len, int) and max_len < k:
            errs.append(f"max_len ({max_len}) is smaller than the gate-cnn kernel "
                        f"(gate_cnn_kernel={k}); raise max_len or lower the kernel")
        return errs

    def __init__(self, d_model: int, gate_cnn_kernel: int) -> None:
        super().__init__()
        if gate_cnn_kernel % 2 == 0 or gate_cnn_kernel < 1:  # direct construction, no config
            raise ValueError(f"gate_cnn_kernel must be odd and positive (2K+1), got {gate_cnn_kernel}")
        self.conv = nn.Conv1d(d_model, d_model, gate_cnn_kernel, padding=gate_cnn_kernel // 2,
                              groups=d_model, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, E, P, mask):
        Pm = P.expand_as(E) * mask.unsqueeze(-1).to(E.dtype)  # (B, L, d), pads zeroed
        c = self.conv(Pm.transpose(1, 2)).transpose(1, 2)  # (B, L, d)
        g = torch.sigmoid(c.mean(dim=-1, keepdim=True) + self.bias)  # (B, L, 1)
        return g * E + (1.0 - g) * P


class MulFusion(Fusion):
    """H = E ⊙ P  (in the reference code, not in the paper; no parameters)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()

    def forward(self, E, P, mask):
        return E * P


FUSIONS: dict[str, type[Fusion]] = {
    "add": AddFusion,
    "concat": ConcatFusion,
    "gate-scalar": GateScalarFusion,
    "gate-vector": GateVectorFusion,
    "gate-mlp": GateMLPFusion,
    "mlp": MLPFusion,
    "gate-cnn": GateCNNFusion,
    "mul": MulFusion,
}


def declared_options(registry: Mapping[str, type[Fusion]]) -> dict[str, FusionOption]:
    """Every operator's options by name, in registry order. Two operators may share an option
    only with the same declaration (one config field cannot have two types or defaults)."""
    out: dict[str, FusionOption] = {}
    for name, op in registry.items():
        for option in op.OPTIONS:
            if out.setdefault(option.name, option) != option:
                raise TypeError(f"fusion {name!r} declares option {option.name!r} unlike "
                                f"another operator: {option} vs {out[option.name]}")
    return out


# The trial-config fields the operators read (TrialConfig adds one per entry).
FUSION_OPTIONS: dict[str, FusionOption] = declared_options(FUSIONS)


def build_fusion(name: str, d_model: int, **options: Any) -> Fusion:
    """The operator `name` of width d_model. `options` may hold any operator's options (as a
    trial config holds them all); the operator takes its own, each missing one at its
    declared default."""
    if name not in FUSIONS:
        raise ValueError(unknown_name("fusion", name, sorted(FUSIONS)))
    unknown = sorted(set(options) - set(FUSION_OPTIONS))
    if unknown:
        raise ValueError(f"unknown fusion option(s) {choices(unknown)}; choose from "
                         f"{choices(sorted(FUSION_OPTIONS))}")
    op = FUSIONS[name]
    return op(d_model=d_model, **{o.name: options.get(o.name, o.default) for o in op.OPTIONS})
