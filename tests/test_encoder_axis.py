"""The encoder axis (issue 12): identity, search-space variants, the structure-noise probe, and
the paired protocol across encoders (same seed: same split, batch order, embedding/classifier)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fusion_sweep.trial.config import ConfigError, TrialConfig
from fusion_sweep.trial.data import DATASETS
from fusion_sweep.trial.data import synthetic as syn
from fusion_sweep.schema import IDENTITY_FIELDS
from fusion_sweep.plan.space import SpaceError, load_space, parse_space

SHUFFLED = sorted(n for n in DATASETS if n.endswith("-shuffled"))
ABLATIONS = {  # switches -> identity label
    (): "ressformer", ("soes",): "ressformer-no-soes", ("asam",): "ressformer-no-asam",
    ("r2mu",): "ressformer-no-r2mu", ("soes", "asam", "r2mu"): "ressformer-no-soes-no-asam-no-r2mu",
}


def ressformer(off: tuple[str, ...] = (), **kw) -> TrialConfig:
    pe = "sinusoidal" if "soes" in off else "none"
    return TrialConfig.build("synthetic-short", encoder="ressformer", pe=pe,
                             **{k: False for k in off}, **kw)


# ------------------------------------------------------------------------------ identity
@pytest.mark.parametrize("off, label", ABLATIONS.items())
def test_identity_names_the_encoder_variant(off, label):
    c = ressformer(off)
    assert tuple(c.identity()) == IDENTITY_FIELDS
    assert c.identity()["encoder"] == label
    assert c.variant_label() == f"{label}/{c.pe}/add"
    assert c.hyperparameters()["encoder"] == "ressformer"  # the registry name stays a param


def test_ablations_and_standard_have_distinct_trial_keys():
    keys = {ressformer(off).trial_key("code") for off in ABLATIONS}
    keys.add(TrialConfig.build("synthetic-short", pe="none").trial_key("code"))
    assert len(keys) == len(ABLATIONS) + 1


def test_soes_requires_pe_none_and_standard_rejects_ressformer_fields():
    with pytest.raises(ConfigError, match=r"soes.*pe 'none'|pe 'none'.*soes"):
        TrialConfig.build("synthetic-short", encoder="ressformer", pe="sinusoidal")
    with pytest.raises(ConfigError, match=r"soes applies only to encoder 'ressformer'"):
        TrialConfig.build("synthetic-short", soes=False)
    with pytest.raises(ConfigError, match=r"unknown encoder 'resformer' \(did you mean "
                                          r"'ressformer'\?\); choose from ressformer, standard"):
        TrialConfig.build("synthetic-short", encoder="resformer")


def test_cli_train_takes_encoder_and_switches_as_fields(capsys):
    from fusion_sweep.cli import main

    assert main(["train", "--dataset", "synthetic-short", "--encoder", "ressformer", "--pe",
                 "sinusoidal", "--override", "soes=false iterations=2", "--show-config"]) == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
    assert rows["encoder"] == "'ressformer'" and rows["soes"] == "False" and rows["iterations"] == "2"
    assert main(["train", "--dataset", "synthetic-short", "--encoder", "ressformer", "--pe",
                 "sinusoidal"]) == 2
    err = capsys.readouterr().err
    assert "error: invalid trial config" in err and "Traceback" not in err and "pe 'none'" in err, err


# ------------------------------------------------------------------------ search spaces
def test_ressformer_space_is_the_documented_grid():
    space = load_space("ressformer")
    labels = [space.trial_config("synthetic-short", v, 0).variant_label()
              for v in space.variant_list()]
    assert labels == ["standard/sinusoidal/add", "standard/rotary/add", "standard/none/add",
                      "ressformer/none/add", "ressformer-no-soes/sinusoidal/add",
                      "ressformer-no-asam/none/add", "ressformer-no-r2mu/none/add"]
    assert set(space.datasets) == {"synthetic-short", "synthetic-medium", "synthetic-long",
                                   *SHUFFLED}
    assert space.seeds == (0, 1, 2, 3, 4) and len(space) == 7 * 6 * 5 == len(space.grid())
    assert space.baseline == "standard/sinusoidal/add"


def _variants_space(**kw) -> dict:
    d = {"name": "v", "datasets": ["synthetic-short"], "seeds": [0],
         "variants": [{"pe": "sinusoidal", "fusion": "add"},
                      {"encoder": "ressformer", "pe": "none", "fusion": "add"}],
         "baseline": "standard/sinusoidal/add"}
    d.update(kw)
    return d


def test_variants_space_errors_are_all_reported():
    d = _variants_space(pes=["sinusoidal"], baseline="standard/rotary/add")
    d["variants"] = d["variants"] + [{"encoder": "ressformer", "pe": "sinusoidal", "fusion": "add"},
                                     {"pe": "none", "fusion": "add", "colour": 1},
                                     {"pe": "none"}]
    with pytest.raises(SpaceError) as e:
        parse_space(d, source="x.yaml")
    errs = "\n".join(e.value.errors)
    assert "pes: give either `variants` or `pes` + `fusions`, not both" in errs
    assert "variants[3].colour: unknown key" in errs
    assert "variants[4]: missing required key(s) fusion" in errs
    assert "variants (dataset=synthetic-short, encoder=ressformer, pe=sinusoidal, fusion=add)" in errs
    d = _variants_space(baseline="standard/rotary/add")
    with pytest.raises(SpaceError, match=r"baseline: variant 'standard/rotary/add' is not one of "
                                         r"this space's variants \(did you mean 'standard/sinusoidal/add'\?\); choose a "
                                         r"fusion from add "
                                         r"or a variant from standard/sinusoidal/add, "
                                         r"ressformer/none/add"):
        parse_space(d, source="x.yaml")


def test_variants_space_round_trips(tmp_path):
    from fusion_sweep.plan.space import dump_space

    space = parse_space(_variants_space())
    back = load_space(dump_space(space, tmp_path / "s.yaml"))
    assert back.variant_list() == space.variant_list() and len(back.grid()) == 2


# --------------------------------------------------------------- structure-noise probe
def _run_order(words: list[str]) -> list[str]:
    out = []
    for i, w in enumerate(words):
        if w.startswith(syn.MARKER_PREFIX) and (i == 0 or words[i - 1] != w):
            out.append(w)
            assert words[i:i + 8] == [w] * 8  # every marker run stays whole
    return out


@pytest.mark.parametrize("name", SHUFFLED)
def test_shuffled_regime_permutes_test_segments_and_keeps_the_label(name):
    spec = DATASETS[name]
    clean = spec.synthetic["base"]
    small = {"n_train": 20, "n_val": 10, "n_test": 60}
    a = syn.generate(name, 2, {**spec.synthetic, **small})
    b = syn.generate(clean, 2, {**DATASETS[clean].synthetic, **small})
    assert a["train"][0] == b["train"][0] and a["validation"][0] == b["validation"][0]
    assert np.array_equal(a["test"][1], b["test"][1])
    moved = 0
    for x, y in zip(a["test"][0], b["test"][0]):
        wx, wy = x.split(), y.split()
        assert Counter(wx) == Counter(wy)  # the same tokens
        assert _run_order(wx) == _run_order(wy)  # the label: which marker comes first
        moved += wx != wy
    assert moved >= 0.9 * len(a["test"][0])
    assert spec.stream_name == clean and DATASETS[clean].stream_name == clean


def test_shuffle_segments_keeps_marker_segments_in_order():
    rng = np.random.default_rng(0)
    words = ["w1", "marker_b", "marker_b", "w2", "w3", "marker_a", "marker_a", "w4", "w5", "w6"]
    for _ in range(200):
        out = syn.shuffle_segments(words, 4, rng)
        assert Counter(out) == Counter(words)
        assert [w for w in out if w.startswith("marker")] == ["marker_b"] * 2 + ["marker_a"] * 2


# ------------------------------------------------- paired protocol across encoders
def test_same_seed_standard_and_ressformer_share_split_batches_and_embedding():
    from fusion_sweep.trial.trainer import train_trial

    kw = dict(epochs=1, limit_train=128, limit_eval=64, latency_repeats=1)
    std = train_trial(TrialConfig.build("synthetic-short", pe="sinusoidal", **kw))
    res = train_trial(ressformer((), **kw))
    abl = train_trial(ressformer(("soes",), **kw))
    for r in (res, abl):
        for fp in ("split", "batch_order", "shared_init", "dropout"):
            assert r.fingerprints[fp] == std.fingerprints[fp], fp
        assert r.fingerprints["encoder_init"] != std.fingerprints["encoder_init"]
    assert res.flops_per_token > 0 and std.flops_per_token > 0
    # the shuffled probe trains exactly as its clean regime: every fingerprint but the split
    shuf = train_trial(TrialConfig.build("synthetic-short-shuffled", pe="sinusoidal", **kw))
    for fp in ("batch_order", "shared_init", "dropout", "encoder_init"):
        assert shuf.fingerprints[fp] == std.fingerprints[fp], fp
    assert shuf.best_val_acc == std.best_val_acc  # same training, same validation set
