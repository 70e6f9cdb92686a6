"""The trial's random streams (`fusion_sweep.trial.seeds`), one function at a time, against
references written from their definitions: each stream's seed, the dataset it is derived
from, the seeded model build, the batch plan and the dropout stream and its fingerprint.
Unit-level (about a second) so that a mutant of seeds.py meets a failing test before any
training run (issue 42). No GPU here: the CUDA branches are checked by recording what they
ask of torch's RNG fork."""
from __future__ import annotations

import dataclasses
import hashlib
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusion_sweep.plan.grid import plan
from fusion_sweep.plan.space import load_space
from fusion_sweep.trial import seeds
from fusion_sweep.trial.batching import epoch_batches
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.models.encoder import construct_model, initialize

CONFIG = plan(load_space("smoke"))[0].config


@pytest.fixture(autouse=True)
def _global_rng_restored():
    """These tests seed torch's global RNG to watch it; the next test gets it back as it was."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


def config(**changes):
    """The smoke trial with some fields changed, unvalidated (a probe's max_len, say)."""
    return SimpleNamespace(**{**dataclasses.asdict(CONFIG), **changes})


# --- each stream's seed ---------------------------------------------------------------

@pytest.mark.parametrize("stream", seeds.STREAMS)
def test_derive_seed_is_the_seed_sequence_of_seed_stream_index_and_dataset_crc(stream):
    entropy = [7, seeds.STREAMS.index(stream), zlib.crc32(b"synthetic-long")]
    state = np.random.SeedSequence(entropy).generate_state(2, np.uint64)
    assert seeds.derive_seed(7, stream, "synthetic-long") == int(state[0] >> 1)
    assert 0 <= seeds.derive_seed(7, stream, "synthetic-long") < 2**63
    assert isinstance(seeds.derive_seed(7, stream, "synthetic-long"), int)


def test_streams_are_appended_never_reordered():
    assert seeds.STREAMS == ("data_order", "shared_init", "fusion_init", "pe_init", "dropout",
                             "encoder_init")


def test_every_stream_seed_and_dataset_gives_its_own_seed():
    got = {seeds.derive_seed(s, stream, d) for s in (0, 1, 2) for stream in seeds.STREAMS
           for d in ("imdb", "arxiv")}
    assert len(got) == 3 * len(seeds.STREAMS) * 2
    with pytest.raises(ValueError):
        seeds.derive_seed(0, "no_such_stream", "imdb")


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_trials_streams_come_from_its_datasets_stream_name(name):
    assert seeds.stream_dataset(config(dataset=name)) == DATASETS[name].stream_name


def test_a_structure_noise_probe_draws_its_clean_regimes_streams():
    assert seeds.stream_dataset(config(dataset="synthetic-long-shuffled")) == "synthetic-long"
    assert seeds.stream_dataset(config(dataset="synthetic-long")) == "synthetic-long"


# --- the seeded model build -----------------------------------------------------------

def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("seed, dataset", [(0, "synthetic-short"), (3, "synthetic-long-shuffled")])
def test_build_model_initialises_each_group_from_its_own_stream(seed, dataset):
    c = config(seed=seed, dataset=dataset)
    d = seeds.stream_dataset(c)
    torch.manual_seed(123)
    want = construct_model(c, 30, 4, 2)
    initialize(want, {g: seeds.derive_seed(seed, f"{g}_init", d)
                      for g in ("shared", "encoder", "fusion", "pe")})
    before = torch.get_rng_state()
    got = seeds.build_model(c, 30, 4, 2)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's RNG is not drawn from
    assert got.embed.num_embeddings == 30 and got.embed.padding_idx == 2
    w, g = params(want), params(got)
    assert w.keys() == g.keys() and all(torch.equal(w[k], g[k]) for k in w)


def test_build_model_pads_with_id_0_by_default():
    assert seeds.build_model(CONFIG, 20, 3).embed.padding_idx == 0


def test_build_model_sends_each_group_its_own_streams_seed(monkeypatch):
    seen = {}
    monkeypatch.setattr(seeds, "construct_model", lambda *a: ("model", a))
    monkeypatch.setattr(seeds, "initialize", lambda model, s: seen.update(s))
    c = config(seed=5, dataset="synthetic-medium-shuffled")
    assert seeds.build_model(c, 11, 3, 1) == ("model", (c, 11, 3, 1))
    assert seen == {g: seeds.derive_seed(5, f"{g}_init", "synthetic-medium")
                    for g in ("shared", "encoder", "fusion", "pe")}


# --- the batch plan -------------------------------------------------------------------

@pytest.mark.parametrize("epochs, max_len, batch", [(1, 80, 16), (3, 5, 4)])
def test_the_training_schedule_is_every_epochs_batches_from_the_data_order_stream(
        epochs, max_len, batch):
    lengths = np.array([3, 9, 12, 4, 30, 7, 8, 2, 15, 6, 11, 5])
    split = SimpleNamespace(lengths=lambda: lengths)
    c = config(seed=4, dataset="synthetic-short-shuffled", epochs=epochs, max_len=max_len,
               batch_size=batch)
    s = seeds.derive_seed(4, "data_order", "synthetic-short")
    want = [epoch_batches(np.minimum(lengths, max_len), batch, s, e) for e in range(epochs)]
    got = seeds.training_schedule(split, c)
    assert len(got) == epochs
    assert all(len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
               for a, b in zip(got, want))


# --- the dropout stream ---------------------------------------------------------------

def test_the_dropout_fingerprint_hashes_a_mask_of_the_probes_size_and_restores_the_rng():
    torch.manual_seed(11)
    state = torch.get_rng_state()
    with torch.random.fork_rng():
        kept = F.dropout(torch.ones(4096), 0.5, training=True) != 0
    want = hashlib.sha256(kept.numpy().tobytes()).hexdigest()[:16]
    assert seeds.DROPOUT_PROBE == 4096
    got = seeds.dropout_fingerprint(torch.device("cpu"))
    assert got == want and len(got) == 16 and int(got, 16) >= 0
    assert torch.equal(torch.get_rng_state(), state)
    assert 1500 < int(kept.sum()) < 2600  # p = 0.5, not p = 1 or 0


def test_the_dropout_stream_is_seeded_yields_its_fingerprint_and_restores_the_rng():
    torch.manual_seed(99)
    state = torch.get_rng_state()
    with seeds.dropout_stream(17, torch.device("cpu")) as fp:
        assert fp == seeds.dropout_fingerprint(torch.device("cpu"))
        inside = torch.rand(5)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(17)
    assert torch.equal(inside, torch.rand(5))  # the fingerprint's draw was put back
    with seeds.dropout_stream(18, torch.device("cpu")) as other:
        pass
    assert other != fp


class Forked(Exception):
    """Raised by the recording fork: the GPU work after it cannot run on this machine."""


@pytest.mark.parametrize("device, devices", [(torch.device("cuda", 0), [0]),
                                             (torch.device("cuda", 2), [2]),
                                             (torch.device("cuda"), [0]),
                                             (torch.device("cpu"), [])])
@pytest.mark.parametrize("call", ["fingerprint", "stream"])
def test_on_a_gpu_both_fork_that_devices_rng(monkeypatch, device, devices, call):
    seen = []

    def fork(devices=None, enabled=True, device_type="cuda", **_):
        seen.append((devices, device_type, enabled))
        raise Forked

    monkeypatch.setattr(torch.random, "fork_rng", fork)
    with pytest.raises(Forked):
        if call == "fingerprint":
            seeds.dropout_fingerprint(device)
        else:
            with seeds.dropout_stream(1, device):
                pass
    assert seen == [(devices, "cuda" if devices else "cpu", True)]


def test_the_fingerprints_mask_is_drawn_on_the_trials_device(monkeypatch):
    """On a GPU the mask must come from that device's generator (the one dropout uses in
    training), not the CPU's: the probe tensor is made on `device`."""
    import contextlib

    seen = []

    def ones(*shape, device=None, **_):
        seen.append((shape, device))
        raise Forked

    monkeypatch.setattr(torch.random, "fork_rng", lambda **_: contextlib.nullcontext())
    monkeypatch.setattr(torch, "ones", ones)
    with pytest.raises(Forked):
        seeds.dropout_fingerprint(torch.device("cuda", 1))
    assert seen == [((seeds.DROPOUT_PROBE,), torch.device("cuda", 1))]
