"""Whitespace tokenizer and train-only vocabulary (the paper's reference code; README "Data").

Tokenization is the reference code's `text.lower().strip().split()`: Python lowercasing,
then splitting on runs of Unicode whitespace (`str.split()` semantics, so punctuation stays
attached to words). The vocabulary is built on the TRAIN split only:

    id 0 = <pad>, id 1 = <unk>, then every token seen at least `min_freq` times,
    most frequent first, ties broken by the token string (code-point order),
    at most `max_size` entries in total (the two specials included).

Two backends compute exactly the same thing (tests check they agree):
  * "python": a `collections.Counter` + dict loop; the default, because it measured faster
              here (2 shared cores, 20k docs: 0.67 s vs 0.86 s at ~40 words/doc, 2.3 s vs
              3.2 s at ~230 words/doc, vocab + encode) - the Rust side is fast but building
              one `Encoding` object per document costs more than it saves;
  * "hf":     HF `tokenizers` WordLevel + WhitespaceSplit (Rust, multi-threaded); may win on
              machines with many idle cores.
Lowercasing is done in Python for both so Unicode special cases (final sigma, 'İ') match
`str.lower()` exactly; HF's WhitespaceSplit uses Rust `char::is_whitespace`, which differs from
`str.isspace()` only on the ASCII separators U+001C..U+001F, so those are mapped to spaces first.
The backend is not part of the cache key because both produce identical arrays.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

# Bump when tokenization or vocabulary semantics change: it is part of every cache key.
TOKENIZER_VERSION = "lower-wsplit-v1"
PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
BACKENDS = ("python", "hf")
DEFAULT_BACKEND = "python"

# str.isspace() is true for these, Rust char::is_whitespace() is not.
_ODD_SPACE = re.compile("[\x1c-\x1f]")
# Documents per encode batch: bounds peak memory on long corpora (ArXiv ~10k words/doc).
_CHUNK = 512

# Incremented on every encode() call; tests use it to prove a cache hit skips tokenization.
ENCODE_CALLS = 0


@dataclass(frozen=True)
class TokenizerSettings:
    """Everything that changes the produced ids; part of the cache key."""

    min_freq: int = 2
    max_size: int = 50_000  # total entries including <pad> and <unk>
    version: str = TOKENIZER_VERSION

    def key(self) -> dict[str, Any]:
        return asdict(self)


def normalize(text: str) -> str:
    """Lowercase (Python semantics) and make whitespace splitting identical across backends."""
    t = text.lower()
    return _ODD_SPACE.sub(" ", t) if _ODD_SPACE.search(t) else t


def split_words(text: str) -> list[str]:
    """The reference tokenizer: `text.lower().strip().split()`."""
    return text.lower().strip().split()


def _resolve(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown tokenizer backend {backend!r}; choose from {list(BACKENDS)}")
    return backend


def _chunks(texts: Sequence[str], size: int = _CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(texts), size):
        yield [normalize(t) for t in texts[start:start + size]]


# --------------------------------------------------------------------------- vocabulary
def build_vocab(texts: Sequence[str], *, min_freq: int = 2, max_size: int = 50_000,
                backend: str = DEFAULT_BACKEND) -> list[str]:
    """Token list; a token's id is its index. Call on the TRAIN split only."""
    if max_size < 2:
        raise ValueError(f"max_size must be >= 2 (for {PAD} and {UNK}), got {max_size}")
    if min_freq < 1:
        raise ValueError(f"min_freq must be >= 1, got {min_freq}")
    if _resolve(backend) == "hf":
        return _build_vocab_hf(texts, min_freq, max_size)
    return _build_vocab_python(texts, min_freq, max_size)


def _build_vocab_python(texts: Sequence[str], min_freq: int, max_size: int) -> list[str]:
    counts: Counter[str] = Counter()
    for t in texts:
        counts.update(normalize(t).split())
    # A token spelled like a special would get two ids; the specials win.
    counts.pop(PAD, None)
    counts.pop(UNK, None)
    kept = sorted((item for item in counts.items() if item[1] >= min_freq),
                  key=lambda kv: (-kv[1], kv[0]))
    return [PAD, UNK] + [tok for tok, _ in kept[: max_size - 2]]


def _new_hf_tokenizer(vocab: dict[str, int] | None = None) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK) if vocab is not None
                    else models.WordLevel(unk_token=UNK))
    # WhitespaceSplit == str.split(); `Whitespace` would also split off punctuation.
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def _build_vocab_hf(texts: Sequence[str], min_freq: int, max_size: int) -> list[str]:
    from tokenizers import trainers

    tok = _new_hf_tokenizer()
    # No special tokens in the trainer: it would misplace them when the text contains them
    # literally. The trainer sorts by (count desc, token asc); `max_size` words leave room to
    # drop literal "<pad>"/"<unk>" words (the python backend drops them before sorting).
    trainer = trainers.WordLevelTrainer(vocab_size=max_size, min_frequency=min_freq,
                                        special_tokens=[], show_progress=False)
    tok.train_from_iterator(_chunks(texts), trainer=trainer, length=len(texts))
    vocab = tok.get_vocab()
    words = [w for w in sorted(vocab, key=vocab.__getitem__) if w not in (PAD, UNK)]
    return [PAD, UNK] + words[: max_size - 2]


# --------------------------------------------------------------------------- encoding
def encode(texts: Sequence[str], vocab: Sequence[str], *,
           backend: str = DEFAULT_BACKEND) -> tuple[np.ndarray, np.ndarray]:
    """Encode documents to flat ids (T,) int32 and offsets (N+1,) int64.

    Unknown tokens map to UNK_ID. A document with no tokens becomes a single <unk> so
    masked mean pooling always has at least one position to average over.
    """
    global ENCODE_CALLS
    ENCODE_CALLS += 1
    if _resolve(backend) == "hf":
        docs: Iterable[list[int]] = _encode_hf(texts, vocab)
    else:
        docs = _encode_python(texts, vocab)
    return _pack(docs, len(texts))


def _encode_python(texts: Sequence[str], vocab: Sequence[str]) -> Iterator[list[int]]:
    # Specials are not words: a literal "<pad>" in the text must not become padding.
    index = {tok: i for i, tok in enumerate(vocab) if i > UNK_ID}
    get = index.get
    for t in texts:
        yield [get(w, UNK_ID) for w in normalize(t).split()]


def _encode_hf(texts: Sequence[str], vocab: Sequence[str]) -> Iterator[list[int]]:
    tok = _new_hf_tokenizer({t: i for i, t in enumerate(vocab)})
    for chunk in _chunks(texts):
        for enc in tok.encode_batch_fast(chunk, add_special_tokens=False):
            yield enc.ids


def _pack(docs: Iterable[list[int]], n: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.zeros(n, dtype=np.int64)
    parts: list[np.ndarray] = []
    for i, ids in enumerate(docs):
        if not ids:
            ids = [UNK_ID]
        lengths[i] = len(ids)
        arr = np.fromiter(ids, dtype=np.int32, count=len(ids))
        arr[arr == PAD_ID] = UNK_ID  # HF maps a literal "<pad>" word to the pad id
        parts.append(arr)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return flat.astype(np.int32, copy=False), offsets


def decode(ids: np.ndarray, vocab: Sequence[str]) -> list[str]:
    """Token strings for ids (debugging and per-example reports)."""
    return [vocab[int(i)] for i in ids]


__all__ = ["TOKENIZER_VERSION", "TokenizerSettings", "build_vocab", "encode", "decode",
           "split_words", "normalize", "PAD", "UNK", "PAD_ID", "UNK_ID", "BACKENDS"]
