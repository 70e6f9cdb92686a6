"""The built-in benchmark does what it promises: order-only labels, learnable with positions."""
from __future__ import annotations

import math

import pytest

from fusion_sweep.config import TrialConfig
from fusion_sweep.data import load_encoded
from fusion_sweep.data.registry import DATASETS
from fusion_sweep.trainer import train_trial

SYNTHETIC = sorted(n for n, s in DATASETS.items() if s.kind == "synthetic")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("name", SYNTHETIC)
def test_position_free_model_is_at_chance(name: str, cache_dir: str) -> None:
    spec = DATASETS[name]
    cfg = TrialConfig.build(name, pe="none", fusion="add", epochs=2, num_threads=1,
                            latency_repeats=1, cache_dir=cache_dir,
                            limit_train=200 if name == "synthetic-long" else 600)
    data = load_encoded(name, cache_dir=cache_dir, limit_train=cfg.limit_train)
    r = train_trial(cfg, data=data)
    chance, n = 1.0 / spec.num_classes, len(data.test)
    sd = math.sqrt(chance * (1 - chance) / n)
    # classes are balanced; a position-free model can only reach chance up to sampling noise
    assert abs(r.test_acc - chance) < 4 * sd, (r.test_acc, chance, sd)


def test_positions_beat_chance_on_short(cache_dir: str) -> None:
    """Sinusoidal PE through a learnable fusion learns marker order within ~20 CPU-seconds."""
    cfg = TrialConfig.build("synthetic-short", pe="sinusoidal", fusion="concat", num_threads=2,
                            latency_repeats=1, cache_dir=cache_dir)
    r = train_trial(cfg)
    assert r.test_acc > 0.5, r.test_acc  # chance is 0.25
