"""The CPU attention-dropout path computes what SDPA's math backend computes (issue 5).

`encoder.attention_with_dropout` replaces F.scaled_dot_product_attention(dropout_p > 0) on CPU
for speed. It must give the same outputs and gradients up to float reordering, draw the same
dropout mask, and leave the RNG stream where SDPA leaves it (later dropouts stay in sync).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.models import encoder
from fusion_sweep.trial.models.positional import POSITIONAL, check_compatible
from fusion_sweep.trial.seeds import build_model

PES = [pe for pe in sorted(POSITIONAL) if not check_compatible(pe, "add")]


def _sdpa(q, k, v, attn_mask, p):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)


def _run(model, ids, attention, monkeypatch):
    monkeypatch.setattr(encoder, "attention_with_dropout", attention)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    logits = model(ids)
    logits.square().sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logits.detach(), grads, torch.rand(4)


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("padded", [True, False])
def test_matches_sdpa_math_backend(pe: str, padded: bool, monkeypatch) -> None:
    cfg = TrialConfig.build("synthetic-short", pe=pe, d_model=32, heads=4, layers=2, dim_ff=64,
                            max_len=80, attn_dropout=0.3)
    model = build_model(cfg, vocab_size=100, num_classes=3)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 100, (5, 40), generator=g)
    if padded:
        ids[1, 25:] = 0
        ids[3, 4:] = 0
    manual = encoder.attention_with_dropout
    a_logits, a_grads, a_next = _run(model, ids, _sdpa, monkeypatch)
    b_logits, b_grads, b_next = _run(model, ids, manual, monkeypatch)
    torch.testing.assert_close(b_logits, a_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b_grads, a_grads, rtol=1e-4, atol=1e-5)
    assert torch.equal(a_next, b_next)  # same RNG consumption: the dropout stream stays in sync


def test_uses_dropout() -> None:
    q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)
    torch.manual_seed(0)
    a = encoder.attention_with_dropout(q, k, v, None, 0.5)
    torch.manual_seed(1)
    b = encoder.attention_with_dropout(q, k, v, None, 0.5)
    assert not torch.allclose(a, b)
