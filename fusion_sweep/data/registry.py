"""Dataset registry: name -> DatasetSpec. The only place dataset names are listed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    num_classes: int
    kind: str  # "hub" (Hugging Face / local copy) or "synthetic"
    hparams: str  # hyperparameter family in config.HPARAM_FAMILIES: "short" | "long"
    hparam_overrides: dict[str, Any] = field(default_factory=dict)
    # hub datasets
    hf_path: str = ""
    text_field: str = "text"
    label_field: str = "label"
    # how validation is made: "from-train" = seeded 10% of train; "split" = the hub's split
    val_split: str = "from-train"
    # synthetic datasets: generator parameters (see data/synthetic.py)
    synthetic: dict[str, Any] = field(default_factory=dict)


DATASETS: dict[str, DatasetSpec] = {
    "agnews": DatasetSpec("agnews", 4, "hub", "short", hf_path="fancyzhx/ag_news"),
    "imdb": DatasetSpec("imdb", 2, "hub", "short", hf_path="stanfordnlp/imdb"),
    "arxiv": DatasetSpec("arxiv", 11, "hub", "long", hf_path="ccdv/arxiv-classification",
                         val_split="split"),
    "synthetic-short": DatasetSpec("synthetic-short", 4, "synthetic", "short"),
    "synthetic-medium": DatasetSpec("synthetic-medium", 2, "synthetic", "short"),
    "synthetic-long": DatasetSpec("synthetic-long", 11, "synthetic", "long"),
}
