"""The built-in benchmark does what it promises: order-only labels, learnable with positions.

Every trial here is a default trial of its regime (the registry's budget), run as the default
sweep runs them: 2 at a time, 1 CPU thread each, longest regime first: 9 trainings
(benchmarks/learning_curve.py measures the regimes in more detail; the default sweep's 5-seed
means are the real target). A structure-noise probe (`<regime>-shuffled`) trains exactly as
its clean regime (the same documents, model and random streams; only its test split differs),
so each model is trained once, on its clean regime, and tested on both test splits: the
probe's accuracy is what a trial of the probe would report.
"""
from __future__ import annotations

import math
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from fusion_sweep.trial import seeds, trainer
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data import load_encoded
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.trainer import train_trial

SYNTHETIC = sorted(n for n, s in DATASETS.items() if s.generated)
# {clean regime: its structure-noise probes}: the probes train as the regime does
PROBES = {n: sorted(p for p in SYNTHETIC if DATASETS[p].synthetic.get("base") == n)
          for n in SYNTHETIC if not DATASETS[n].synthetic.get("base")}
# Two seeds of one learnable fusion per regime: a regime that learns leaves the plateau at
# chance in (nearly) every seed, one that does not stays at chance in both.
LEARN_FUSION, LEARN_SEEDS = "concat", (0, 1)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


def _probe_config(config: TrialConfig, probe: str) -> TrialConfig:
    return TrialConfig.build(probe, pe=config.pe, fusion=config.fusion, seed=config.seed,
                             num_threads=config.num_threads, cache_dir=config.cache_dir)


def _test_accs(config: TrialConfig) -> list[float]:
    """[test_acc of one default trial of `config`, then, for each of its regime's probes, the
    test_acc of the same trained model (its best epoch) on the probe's test split], the probe
    tested as the trainer tests a trial's model (`trainer._test`, same threads, determinism,
    precision and evaluation batches)."""
    result = train_trial(config.replace(save_checkpoint=True))
    accs = [result.test_acc]
    for probe in PROBES[config.dataset]:
        pconfig = _probe_config(config, probe)
        data = trainer.load_data(pconfig)
        device = trainer.resolve_device(pconfig.device)
        speed = trainer.SpeedOptions.from_env().for_device(device)
        with trainer.cpu_threads(pconfig.num_threads), trainer.deterministic(device), \
                trainer.precision_mode(pconfig.precision, device):
            model = seeds.build_model(pconfig, data.vocab_size, data.num_classes, data.pad_id)
            model.to(device)
            model.load_state_dict(result.checkpoint)
            acc, _, _ = trainer._test(pconfig, data, device, model, speed,
                                      pconfig.batch_size * speed.eval_batch_mult)
        accs.append(acc)
    return accs


def _same_split(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("ids", "offsets", "labels"))


@pytest.fixture(scope="module")
def trials(cache_dir: str) -> dict[tuple[str, str], list[float]]:
    """{(regime, pe): test accuracies}: LEARN_FUSION with sinusoidal PE on LEARN_SEEDS, and
    `add` without positions on seed 0, each one default trial of the regime; a probe's are
    its clean regime's models tested on the probe's test split."""
    for name in SYNTHETIC:
        load_encoded(name, cache_dir=cache_dir)  # generate once, before two workers race for it
    assert sorted([*PROBES, *(p for ps in PROBES.values() for p in ps)]) == SYNTHETIC
    for clean, probes in PROBES.items():  # what makes one training serve both test splits
        a = load_encoded(clean, cache_dir=cache_dir)
        for probe in probes:
            b = load_encoded(probe, cache_dir=cache_dir)
            assert _same_split(a.train, b.train) and _same_split(a.val, b.val), probe
            assert (a.vocab_size, a.num_classes, a.pad_id) == (b.vocab_size, b.num_classes, b.pad_id)
            assert DATASETS[probe].stream_name == clean
    longest_first = sorted(PROBES, key=lambda n: -DATASETS[n].longest_document())
    configs = [TrialConfig.build(name, pe=pe, fusion=fusion, seed=seed, num_threads=1,
                                 cache_dir=cache_dir)
               for name in longest_first
               for pe, fusion, seeds in (("sinusoidal", LEARN_FUSION, LEARN_SEEDS),
                                         ("none", "add", (0,)))
               for seed in seeds]
    for c in configs:  # the same trial but for the dataset's name
        for probe in PROBES[c.dataset]:
            assert _probe_config(c, probe).replace(dataset=c.dataset) == c, probe
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
        accs = list(ex.map(_test_accs, configs))
    out: dict[tuple[str, str], list[float]] = {}
    for c, acc in zip(configs, accs):
        for dataset, a in zip([c.dataset, *PROBES[c.dataset]], acc, strict=True):
            out.setdefault((dataset, c.pe), []).append(a)
    return out


@pytest.mark.parametrize("name", SYNTHETIC)
def test_position_free_model_is_at_chance(name: str, trials: dict, cache_dir: str) -> None:
    """pe=none trained for the full default budget (where positions learn) stays at chance:
    the bag of tokens is the same in every class and no document is truncated."""
    (acc,) = trials[(name, "none")]
    chance = 1.0 / DATASETS[name].num_classes
    n = len(load_encoded(name, cache_dir=cache_dir).test)
    sd = math.sqrt(chance * (1 - chance) / n)
    # classes are balanced; a position-free model can only reach chance up to sampling noise
    assert abs(acc - chance) < 4 * sd, (acc, chance, sd)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_every_regime_is_learnable(name: str, trials: dict) -> None:
    """With positions, a default trial clears the default sweep's learnability target (halfway
    from chance to 1, which the sweep asks of the 5-seed mean of the best fusion) in at least
    one of two seeds, and the two average well above chance (not one lucky seed)."""
    accs = trials[(name, "sinusoidal")]
    chance = 1.0 / DATASETS[name].num_classes
    assert max(accs) >= chance + 0.5 * (1 - chance), (name, accs, chance)
    assert float(np.mean(accs)) >= chance + 0.4 * (1 - chance), (name, accs, chance)
