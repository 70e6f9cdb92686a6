"""Fusion operators: how token embeddings E and positional encodings P become the input H.

Every operator maps `(E, P, mask) -> H`, with
    E:    (B, L, d)  token embeddings, already scaled by sqrt(d)
    P:    (1, L, d)  positional encodings (the same for every document)
    mask: (B, L)     True at real tokens, False at right-padding
    H:    (B, L, d)

Paper §3.2–3.3 and the reference code (README "Fusion operators"). Fusion-specific parameters
live in these modules only, so the trainer can initialise them from their own generator. Each
operator carries its own rules: `accepts_absent_p` (whether it has a meaning when the PE
produces no P, see positional.check_compatible) and `config_errors` (its constraints on the
trial config), so adding an operator touches this file only.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.errors import unknown_name


class Fusion(nn.Module):
    """Base class."""

    # True where the operator still means something when a PE produces no P (attention-level
    # families, `none`): then H = op(E, 0). Only `add` (H = E) qualifies; others would compute
    # something other than what their name says.
    accepts_absent_p = False

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

    def __init__(self, d_model: int, **_: object) -> None:
        super().__init__()

    def forward(self, E, P, mask):
        return E + P


class ConcatFusion(Fusion):
    """H = W [E; P] + b,  W ∈ R^{d×2d}  (paper eq. 2; nn.Linear(2d, d) as in the reference)."""

    def __init__(self, d_model: int, **_: object) -> None:
        super().__init__()
        self.proj = nn.Linear(2 * d_model, d_model)

    def forward(self, E, P, mask):
        return self.proj(torch.cat([E, P.expand_as(E)], dim=-1))


class GateScalarFusion(Fusion):
    """g_i = σ(wᵀ[E_i; P_i] + b) — one scalar per position;  H_i = g_i E_i + (1 − g_i) P_i.

    Paper eq. 3–4 (Gate-Scalar); the ArXiv reference code's `nn.Linear(2d, 1)` gate.
    """

    def __init__(self, d_model: int, **_: object) -> None:
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

    def __init__(self, d_model: int, **_: object) -> None:
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

    def __init__(self, d_model: int, **_: object) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2 * d_model, d_model)
        self.fc2 = nn.Linear(d_model, d_model)

    def forward(self, E, P, mask):
        P = P.expand_as(E)
        g = torch.sigmoid(self.fc2(F.relu(self.fc1(torch.cat([E, P], dim=-1)))))  # (B, L, d)
        return g * E + (1.0 - g) * P


class MLPFusion(Fusion):
    """H = W₂ ReLU(W₁[E; P] + b₁) + b₂  (2d→d→d): what the reference code's "mlp" computes."""

    def __init__(self, d_model: int, **_: object) -> None:
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

    @classmethod
    def config_errors(cls, config: Any) -> list[str]:
        k, max_len = config.gate_cnn_kernel, config.max_len
        if not isinstance(k, int) or isinstance(k, bool):
            return []  # the generic positive-integer check names it
        errs = []
        if k >= 1 and k % 2 == 0:  # k < 1: the generic positive-integer check names it
            errs.append(f"gate_cnn_kernel must be odd (2K+1), got {k}")
        if isinstance(max_len, int) and max_len < k:
            errs.append(f"max_len ({max_len}) is smaller than the gate-cnn kernel "
                        f"(gate_cnn_kernel={k}); raise max_len or lower the kernel")
        return errs

    def __init__(self, d_model: int, gate_cnn_kernel: int = 5, **_: object) -> None:
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

    def __init__(self, d_model: int, **_: object) -> None:
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


def build_fusion(name: str, d_model: int, gate_cnn_kernel: int = 5) -> Fusion:
    if name not in FUSIONS:
        raise ValueError(unknown_name("fusion", name, sorted(FUSIONS)))
    return FUSIONS[name](d_model=d_model, gate_cnn_kernel=gate_cnn_kernel)
