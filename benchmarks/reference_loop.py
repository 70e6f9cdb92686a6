"""A faithful re-implementation of the paper's reference training loop — for benchmarks ONLY.

This module is never imported by the product. It mirrors what the public reference notebooks
(MoAmineHallam/Fusion-matters: `notebooks/AGNews_IMDB_sinusoidal_add_concat_gate.ipynb` and
`notebooks/arxiv_pefusion.ipynb`) do on every training step, so `trial_throughput.py` can
measure the product's trainer against it side by side:

- the vocabulary is a Python dict; a `Dataset` lowercases, whitespace-splits and looks up every
  document in `__getitem__`, on every epoch, and pads it to `max_len` (512 or 4096) whatever
  its real length;
- a `DataLoader(shuffle=True, generator=seeded)` collates fixed-size `(B, max_len)` batches;
- the model is `Embedding(ids) * sqrt(d)` + a sinusoidal table, a fusion operator, then
  `nn.TransformerEncoder(nn.TransformerEncoderLayer(..., batch_first=True))` called with
  `src_key_padding_mask` (post-norm; attention dropout tied to `dropout`), masked mean pooling
  and a linear classifier;
- the step is `zero_grad -> forward -> CrossEntropyLoss -> backward -> [clip_grad_norm_] ->
  step -> loss.item()`.

Deliberate choices (all documented in benchmarks/README.md):
- `num_workers` defaults to 0. The AG News / IMDB notebook used 2 workers, the ArXiv one 0.
  On a 2-core machine whose 2 cores already run the 2 compute threads, extra worker processes
  only compete with them; tokenization costs under 1% of a padded step either way.
- `pool_dropout` (the AG News / IMDB notebook applies `Dropout(0.1)` to the pooled vector before
  the classifier; the ArXiv notebook does not) defaults to False so the "identical math"
  comparison matches fusion-sweep's model, which has no such dropout. Its cost is B·d
  elementwise operations per step — unmeasurable next to the encoder.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

PAD, UNK = "<pad>", "<unk>"


# ----------------------------------------------------------------------------- tokenization
def simple_tokenize(text: str) -> list[str]:
    """Lowercase + whitespace split (the reference tokenizer)."""
    return text.lower().strip().split()


def encode_padded(text: str, vocab: dict[str, int], max_len: int) -> list[int]:
    """Token ids truncated to `max_len`, then right-padded with <pad> up to exactly `max_len`."""
    unk = vocab[UNK]
    ids = [vocab.get(tok, unk) for tok in simple_tokenize(text)[:max_len]]
    return ids + [vocab[PAD]] * (max_len - len(ids))


class PaddedTextDataset(Dataset):
    """Tokenizes in `__getitem__`, every time an item is read (as the reference does)."""

    def __init__(self, texts: Sequence[str], labels: Sequence[int], vocab: dict[str, int], max_len: int) -> None:
        self.texts, self.labels, self.vocab, self.max_len = texts, labels, vocab, max_len

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor(encode_padded(self.texts[i], self.vocab, self.max_len), dtype=torch.long)
        return x, torch.tensor(int(self.labels[i]), dtype=torch.long)


# ----------------------------------------------------------------------------------- model
def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d): sin on even features, cos on odd ones."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * inv)
    table[:, 1::2] = torch.cos(position * inv)
    return table


class ReferenceFusion(nn.Module):
    """The reference notebooks' fusion operators (names as fusion-sweep registers them)."""

    def __init__(self, d_model: int, fusion: str) -> None:
        super().__init__()
        self.fusion = fusion
        if fusion == "concat":
            self.proj = nn.Linear(2 * d_model, d_model)
        elif fusion == "gate-vector":  # AG News / IMDB notebook's "gate"
            self.gate = nn.Linear(2 * d_model, d_model)
        elif fusion == "gate-scalar":  # ArXiv notebook's "gate"
            self.gate = nn.Linear(2 * d_model, 1)
        elif fusion == "mlp":
            self.mlp = nn.Sequential(nn.Linear(2 * d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        elif fusion not in ("add", "mul"):
            raise ValueError(f"the reference code has no fusion {fusion!r}")

    def forward(self, E: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
        P = P.expand(E.shape[0], -1, -1)
        if self.fusion == "add":
            return E + P
        if self.fusion == "mul":
            return E * P
        EP = torch.cat([E, P], dim=-1)
        if self.fusion == "concat":
            return self.proj(EP)
        if self.fusion == "mlp":
            return self.mlp(EP)
        g = torch.sigmoid(self.gate(EP))
        return g * E + (1 - g) * P


class ReferenceClassifier(nn.Module):
    def __init__(self, *, vocab_size: int, num_classes: int, d_model: int, heads: int, layers: int,
                 dim_ff: int, dropout: float, activation: str, max_len: int, fusion: str = "add",
                 pool_dropout: bool = False) -> None:
        super().__init__()
        self.d_model = d_model
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model)[None], persistent=False)
        self.fuse = ReferenceFusion(d_model, fusion)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=heads, dim_feedforward=dim_ff,
                                           dropout=dropout, activation=activation, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.pool_dropout = nn.Dropout(dropout) if pool_dropout else nn.Identity()
        self.cls = nn.Linear(d_model, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad_mask = ids == 0  # (B, L) True at padding
        E = self.emb(ids) * math.sqrt(self.d_model)
        H = self.encoder(self.fuse(E, self.pe[:, : ids.shape[1]]), src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).to(H.dtype)
        pooled = (H * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.cls(self.pool_dropout(pooled))


# ----------------------------------------------------------------------------------- loop
@dataclass
class ReferenceRun:
    model: ReferenceClassifier
    optimizer: torch.optim.Optimizer
    loader: DataLoader
    grad_clip: float
    _it: Iterator | None = None

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The DataLoader's next batch, starting a new (reshuffled) epoch when one ends."""
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.loader)
            return next(self._it)


def build_reference(texts: Sequence[str], labels: Sequence[int], vocab: dict[str, int], *,
                    num_classes: int, max_len: int, d_model: int, heads: int, layers: int,
                    dim_ff: int, dropout: float, activation: str, optimizer: str, lr: float,
                    weight_decay: float, grad_clip: float, batch_size: int, seed: int,
                    fusion: str = "add", num_workers: int = 0, pool_dropout: bool = False) -> ReferenceRun:
    """Seed globally (as the notebooks' `set_seed`), build the model, optimizer and loader."""
    torch.manual_seed(seed)
    model = ReferenceClassifier(vocab_size=len(vocab), num_classes=num_classes, d_model=d_model,
                                heads=heads, layers=layers, dim_ff=dim_ff, dropout=dropout,
                                activation=activation, max_len=max_len, fusion=fusion,
                                pool_dropout=pool_dropout)
    if optimizer == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator()
    g.manual_seed(seed)
    loader = DataLoader(PaddedTextDataset(texts, labels, vocab, max_len), batch_size=batch_size,
                        shuffle=True, generator=g, num_workers=num_workers)
    return ReferenceRun(model, opt, loader, grad_clip)


def train_steps(run: ReferenceRun, n_steps: int) -> tuple[int, int, float]:
    """The reference training step, `n_steps` times. -> (real tokens, Σ real_len², seconds).

    The clock covers everything the reference loop does per step, loading and tokenizing the
    batch included.
    """
    run.model.train()
    loss_fn = nn.CrossEntropyLoss()
    tokens = sq = 0
    t0 = time.perf_counter()
    for _ in range(n_steps):
        x, y = run.next_batch()
        run.optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(run.model(x), y)
        loss.backward()
        if run.grad_clip > 0:
            nn.utils.clip_grad_norm_(run.model.parameters(), run.grad_clip)
        run.optimizer.step()
        loss.item()
        n = (x != 0).sum(1)
        tokens += int(n.sum())
        sq += int((n * n).sum())
    return tokens, sq, time.perf_counter() - t0
