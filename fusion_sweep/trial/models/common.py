"""What both encoder bodies (models/encoder.py, models/ressformer.py) share: the feed-forward
sub-layer, its activations, and the helpers for the rules their registry entries check."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_sweep.trial.models.positional import POSITIONAL

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}


class FeedForwardSublayer(nn.Module):
    """The feed-forward half of an encoder layer, named as in nn.TransformerEncoderLayer
    (linear1/2, norm1/2, dropout/1/2). A layer sets its attention first, then calls
    `_add_feed_forward`: the parameters register in that order, which the init streams walk."""

    def _add_feed_forward(self, d_model: int, dim_ff: int, dropout: float, activation: str,
                          norm_first: bool) -> None:
        self.linear1 = nn.Linear(d_model, dim_ff)
        self.linear2 = nn.Linear(dim_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.act = ACTIVATIONS[activation]
        self.norm_first = norm_first

    def _ff(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.linear2(self.dropout(self.act(self.linear1(x)))))


def field_defaults(config: Any) -> dict[str, Any]:
    """The config class's field defaults (the TrialConfig is their one home); {} if the
    config is not a dataclass."""
    if not dataclasses.is_dataclass(config):
        return {}
    return {f.name: f.default for f in dataclasses.fields(type(config))
            if f.default is not dataclasses.MISSING}


def changed_fields(config: Any, names: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    """(field, value, default) of each of `names` the config sets away from its default: the
    fields a stray value of would be silently ignored (another encoder's, a switched-off
    part's)."""
    defaults = field_defaults(config)
    return [(f, getattr(config, f), defaults[f]) for f in names
            if f in defaults and getattr(config, f) != defaults[f]]


def order_from_pe(config: Any) -> str | None:
    """How the positional encoding lets a model see order, or None for a position-free pe."""
    level = POSITIONAL[config.pe].level if config.pe in POSITIONAL else "none"
    if level == "none":
        return None
    where = "added to the input" if level == "input" else "inside attention"
    return f"yes: pe {config.pe!r} ({where})"
