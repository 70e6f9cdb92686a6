"""Fusion operators × positional encodings: shapes, gradients, parameter counts, padding invariance,
parameter groups. ReSSFormer's own tests: tests/test_ressformer.py."""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import re

import pytest
import torch

from fusion_sweep.trial.config import ConfigError, TrialConfig
from fusion_sweep.trial.models.encoder import (FusionClassifier, ModelSpec, count_parameters,
                                               encoder_init_hash, initialize, shared_init_hash)
from fusion_sweep.trial.models.fusion import (FUSION_OPTIONS, FUSIONS, FusionOption, build_fusion,
                                              declared_options)
from fusion_sweep.trial.models.positional import POSITIONAL, check_compatible
from fusion_sweep.trial.models.encoder import construct_model

D, H, VOCAB, C, MAX_LEN = 16, 4, 50, 3, 32
ALL = list(itertools.product(sorted(POSITIONAL), sorted(FUSIONS)))
ALLOWED = [(pe, f) for pe, f in ALL if check_compatible(pe, f) is None]
REJECTED = [(pe, f) for pe, f in ALL if check_compatible(pe, f) is not None]


def make_model(pe: str, fusion: str, seed: int = 0) -> FusionClassifier:
    m = FusionClassifier(ModelSpec(fusion=fusion, pe=pe, max_len=MAX_LEN, d_model=D, heads=H,
                                   layers=2, dim_ff=32, dropout=0.1, attn_dropout=0.1,
                                   activation="gelu", fusion_options={"gate_cnn_kernel": 5}),
                         vocab_size=VOCAB, num_classes=C)
    initialize(m, {"shared": seed, "encoder": seed + 3, "fusion": seed + 1, "pe": seed + 2})
    return m


def test_registry_split_is_complete() -> None:
    # every input-level PE allows every fusion; attention-level/none allow exactly `add`
    assert len(ALLOWED) + len(REJECTED) == len(POSITIONAL) * len(FUSIONS)
    for pe, cls in POSITIONAL.items():
        allowed = {f for p, f in ALLOWED if p == pe}
        assert allowed == (set(FUSIONS) if cls.level == "input" else {"add"})


@pytest.mark.parametrize("pe,fusion", ALLOWED)
def test_forward_backward_shapes(pe: str, fusion: str) -> None:
    m = make_model(pe, fusion)
    ids = torch.randint(1, VOCAB, (3, 11), generator=torch.Generator().manual_seed(0))
    ids[1, 7:] = 0  # right padding
    logits = m(ids)
    assert logits.shape == (3, C)
    logits.sum().backward()
    for name, p in m.named_parameters():
        if p.requires_grad and not name.startswith("embed"):
            assert p.grad is not None, name
            assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("pe,fusion", REJECTED)
def test_rejected_combinations_have_clear_error(pe: str, fusion: str) -> None:
    with pytest.raises(ValueError, match=rf"fusion '{fusion}' needs an input-level positional encoding.*pe '{pe}'"):
        TrialConfig.build("synthetic-short", pe=pe, fusion=fusion)


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_fusion_output_shape(fusion: str) -> None:
    op = build_fusion(fusion, D)
    E, P = torch.randn(2, 7, D), torch.randn(1, 7, D)
    mask = torch.ones(2, 7, dtype=torch.bool)
    assert op(E, P, mask).shape == (2, 7, D)


def test_parameter_counts() -> None:
    d = 64
    assert count_parameters(build_fusion("add", d)) == 0
    assert count_parameters(build_fusion("mul", d)) == 0
    assert count_parameters(build_fusion("concat", d)) == 2 * d * d + d
    assert count_parameters(build_fusion("gate-scalar", d)) == 2 * d + 1
    assert count_parameters(build_fusion("gate-vector", d)) == 2 * d * d + d
    assert count_parameters(build_fusion("gate-mlp", d)) == (2 * d * d + d) + (d * d + d)
    assert count_parameters(build_fusion("mlp", d)) == (2 * d * d + d) + (d * d + d)
    assert count_parameters(build_fusion("gate-cnn", d, gate_cnn_kernel=7)) == 7 * d + 1


def test_gate_scalar_is_convex_mix() -> None:
    op = build_fusion("gate-scalar", D)
    E, P = torch.randn(1, 5, D), torch.randn(1, 5, D)
    H_ = op(E, P, torch.ones(1, 5, dtype=torch.bool))
    g = torch.sigmoid(op.gate(torch.cat([E, P], -1)))
    torch.testing.assert_close(H_, g * E + (1 - g) * P)


@pytest.mark.parametrize("pe,fusion", ALLOWED)
def test_padding_invariance(pe: str, fusion: str) -> None:
    """A document's eval logits do not depend on how much right-padding its batch has."""
    torch.manual_seed(0)
    m = make_model(pe, fusion).eval()
    g = torch.Generator().manual_seed(1)
    doc = torch.randint(1, VOCAB, (9,), generator=g)
    other = torch.randint(1, VOCAB, (MAX_LEN,), generator=g)
    alone = m(doc.unsqueeze(0))  # no padding at all
    for extra in (1, 5, MAX_LEN - 9):
        batch = torch.zeros(2, 9 + extra, dtype=torch.long)
        batch[0, :9] = doc
        batch[1] = other[: 9 + extra]
        with torch.inference_mode():
            padded = m(batch)[0:1]
        assert (padded - alone).abs().max().item() <= 1e-5, (extra, (padded - alone).abs().max())


def test_none_is_position_free() -> None:
    """pe=none + mean pooling is permutation invariant: shuffling a document changes nothing."""
    m = make_model("none", "add").eval()
    doc = torch.randint(1, VOCAB, (1, 12), generator=torch.Generator().manual_seed(3))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(m(doc), m(doc[:, perm]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pe", [p for p, c in POSITIONAL.items() if c.level != "none"])
def test_positional_families_see_order(pe: str) -> None:
    m = make_model(pe, "add").eval()
    doc = torch.randint(1, VOCAB, (1, 12), generator=torch.Generator().manual_seed(3))
    # a random permutation, not a reversal: symmetric relative schemes (alibi) are
    # reversal-invariant under mean pooling by construction
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(4))
    assert not torch.allclose(m(doc), m(doc[:, perm]), atol=1e-6)


def test_shared_init_independent_of_fusion_and_pe() -> None:
    a, b = make_model("sinusoidal", "add"), make_model("learned", "gate-mlp")
    for group in ("shared", "encoder"):
        sa, sb = dict(a.parameter_groups()[group]), dict(b.parameter_groups()[group])
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k], sb[k]), k
    assert shared_init_hash(a) == shared_init_hash(b)
    assert encoder_init_hash(a) == encoder_init_hash(b)


def test_parameter_groups_partition_the_model() -> None:
    """shared = embedding + classifier (every encoder has them), encoder = the body."""
    m = make_model("learned", "concat")
    groups = m.parameter_groups()
    assert sorted(groups) == ["encoder", "fusion", "pe", "shared"]
    names = [n for g in groups.values() for n, _ in g]
    assert sorted(names) == sorted(n for n, _ in m.named_parameters())  # each exactly once
    assert {n.split(".")[0] for n, _ in groups["shared"]} == {"embed", "classifier"}
    assert all(n.startswith("encoder.") for n, _ in groups["encoder"])


def test_initialize_needs_every_group_seed() -> None:
    m = FusionClassifier(ModelSpec(fusion="add", pe="none", max_len=MAX_LEN, d_model=D, heads=H,
                                   layers=1, dim_ff=32, dropout=0.0, attn_dropout=0.0,
                                   activation="gelu"), vocab_size=VOCAB, num_classes=C)
    with pytest.raises(KeyError, match=r"missing \['encoder'\]"):
        initialize(m, {"shared": 0, "fusion": 1, "pe": 2})


def test_encoder_seed_moves_only_the_body() -> None:
    a, b = make_model("sinusoidal", "add"), make_model("sinusoidal", "add")
    initialize(b, {"shared": 0, "encoder": 99, "fusion": 1, "pe": 2})
    assert shared_init_hash(a) == shared_init_hash(b)
    assert encoder_init_hash(a) != encoder_init_hash(b)


def test_unknown_encoder_names_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown encoder 'x'; choose from ressformer, standard"):
        FusionClassifier(ModelSpec(fusion="add", pe="none", max_len=MAX_LEN, d_model=D, heads=H,
                                   layers=1, dim_ff=32, dropout=0.0, attn_dropout=0.0,
                                   activation="gelu", encoder="x"),
                         vocab_size=VOCAB, num_classes=C)


def test_gate_cnn_kernel_validation() -> None:
    with pytest.raises(ValueError, match=r"max_len \(3\) is smaller than the gate-cnn kernel"):
        TrialConfig.build("synthetic-short", fusion="gate-cnn", max_len=3)
    with pytest.raises(ValueError, match=r"gate_cnn_kernel must be odd"):
        TrialConfig.build("synthetic-short", fusion="gate-cnn", gate_cnn_kernel=4)


# ------------------------------------------------ fusion options: declared once, on the op
def _field(name: str) -> dataclasses.Field:
    return {f.name: f for f in dataclasses.fields(TrialConfig)}[name]


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_fusion_options_are_config_fields_as_declared(name: str) -> None:
    """Each option an operator declares is a TrialConfig field of the declared type and
    default (the config holds it, keys and logs it), every trial reads it at that default,
    and the operator's constructor takes exactly its declared options besides d_model."""
    op = FUSIONS[name]
    config = TrialConfig.build("synthetic-short", fusion=name)
    for option in op.OPTIONS:
        assert FUSION_OPTIONS[option.name] == option
        assert (_field(option.name).type, _field(option.name).default) == (option.type, option.default)
        assert getattr(config, option.name) == option.default
        assert option.name in config.hyperparameters()  # an MLflow param, as before
    assert op.options(config) == {o.name: o.default for o in op.OPTIONS}
    taken = [p for p in inspect.signature(op.__init__).parameters if p not in ("self", "d_model")]
    assert taken == [o.name for o in op.OPTIONS], f"{name}'s constructor takes undeclared options"


def test_fusion_option_defaults_are_the_references() -> None:
    """The declared defaults are the paper's reference code's (gate-cnn: width 5); every
    declared option is a config field, persisted under its name (a rename moves keys)."""
    assert {n: (o.type, o.default, o.minimum) for n, o in FUSION_OPTIONS.items()} \
        == {"gate_cnn_kernel": (int, 5, 1)}
    assert set(FUSION_OPTIONS) <= set(TrialConfig.field_names())
    assert TrialConfig.build("synthetic-short", fusion="add").gate_cnn_kernel == 5
    assert TrialConfig.build("synthetic-short", fusion="gate-cnn", gate_cnn_kernel=1).gate_cnn_kernel == 1
    with pytest.raises(ConfigError, match=r"gate_cnn_kernel must be an integer >= 1, got 0"):
        TrialConfig.build("synthetic-short", fusion="gate-cnn", gate_cnn_kernel=0)


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_fusion_activation_floats_feed_the_memory_estimate(name: str) -> None:
    """The operator's own saved elements (a registry fact, never its name compared): none for
    add, 3 (B, L, d) tensors for every operator that widens, gates or multiplies; the memory
    estimate differs from add's by exactly that."""
    from fusion_sweep.trial import memory

    config = TrialConfig.build("synthetic-short", fusion=name)
    B, L = memory.longest_batch(config)
    want = 0 if name == "add" else 3 * B * L * config.d_model
    assert FUSIONS[name].activation_floats(config, B, L) == want
    add = TrialConfig.build("synthetic-short", fusion="add")
    assert memory.activation_elements(config) - memory.activation_elements(add) == want


def _wrong_type(option: FusionOption) -> object:
    return 2.5 if option.type is not float else "x"  # a str option takes every value as text


def _below(option: FusionOption) -> object:
    return option.minimum - (1 if option.type is int else 0.5)


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_fusion_option_errors_name_the_field_all_at_once(name: str) -> None:
    """A wrong type or a value below the bound, for each option of the operator: one message
    per field, all of them at once beside the config's other errors. Every trial holds
    every operator's options, so they are checked whichever fusion the trial uses."""
    op = FUSIONS[name]
    typed = [o for o in op.OPTIONS if o.type is not str]
    bounded = [o for o in op.OPTIONS if o.minimum is not None]
    for options, expect in ((typed, _wrong_type), (bounded, _below)):
        bad = {o.name: expect(o) for o in options}
        with pytest.raises(ConfigError, match=r"epochs must be a positive integer, got 0") as err:
            TrialConfig.build("synthetic-short", fusion=name, epochs=0, **bad)
        for o in options:
            bound = f" >= {o.minimum}" if o.minimum is not None else ""
            want = rf"{o.name} must be an? \w+{re.escape(bound)}, got {re.escape(repr(bad[o.name]))}"
            assert any(re.fullmatch(want, e) for e in err.value.errors), (want, err.value.errors)
    for other in FUSION_OPTIONS.values():  # another operator's option is checked too
        if other.minimum is not None:
            with pytest.raises(ConfigError, match=rf"{other.name} must be an? \w+ >= "):
                TrialConfig.build("synthetic-short", fusion=name, **{other.name: _below(other)})


def test_fusion_option_type_and_bound_rules() -> None:
    """The declaration's own check: a bool is no int, an int is a fine float, the bound is
    inclusive; the message names the field, the type, the bound and the value."""
    @dataclasses.dataclass
    class Config:
        n: object = 1
        x: object = 1.0
        b: object = True

    n, x, b = FusionOption("n", int, 1, minimum=1), FusionOption("x", float, 0.0, minimum=0.0), \
        FusionOption("b", bool, True)
    assert n.config_errors(Config()) == x.config_errors(Config(x=3)) == b.config_errors(Config()) == []
    assert n.config_errors(Config(n=True)) == ["n must be an integer >= 1, got True"]
    assert n.config_errors(Config(n=0)) == ["n must be an integer >= 1, got 0"]
    assert x.config_errors(Config(x=-0.5)) == ["x must be a number >= 0.0, got -0.5"]
    assert x.config_errors(Config(x=False)) == ["x must be a number >= 0.0, got False"]
    assert b.config_errors(Config(b=1)) == ["b must be true or false, got 1"]


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_fusion_is_built_with_its_options_from_the_config(name: str) -> None:
    """The trainer's model gets the operator the config names with the config's values of its
    options (ModelSpec.of -> FusionClassifier -> build_fusion); build_fusion takes every
    operator's options (as a config holds them all) and names an unknown one."""
    op = FUSIONS[name]
    config = TrialConfig.build("synthetic-short", fusion=name, gate_cnn_kernel=3)
    assert ModelSpec.of(config).fusion_options == op.options(config)
    model = construct_model(config, vocab_size=VOCAB, num_classes=C, pad_id=0)
    assert type(model.fusion) is op
    built = build_fusion(name, D, **{o.name: getattr(config, o.name) for o in FUSION_OPTIONS.values()})
    assert type(built) is op
    alone = build_fusion(name, config.d_model, **op.options(config))
    assert count_parameters(model.fusion) == count_parameters(alone)
    with pytest.raises(ValueError, match=r"unknown fusion option\(s\) nope; choose from gate_cnn_kernel"):
        build_fusion(name, D, nope=1)


def test_gate_cnn_width_comes_from_the_config() -> None:
    """gate_cnn_kernel reaches the convolution (no default in between): 3 and 7 taps."""
    for k in (3, 7):
        config = TrialConfig.build("synthetic-short", fusion="gate-cnn", gate_cnn_kernel=k)
        model = construct_model(config, vocab_size=VOCAB, num_classes=C, pad_id=0)
        assert model.fusion.conv.weight.shape == (config.d_model, 1, k)
    assert build_fusion("gate-cnn", D).conv.weight.shape == (D, 1, 5)  # the declared default


def test_fusion_options_declared_twice_must_agree() -> None:
    """Two operators may share an option only with one declaration (one config field)."""
    class A(FUSIONS["add"]):
        OPTIONS = (FusionOption("k", int, 3),)

    class B(FUSIONS["add"]):
        OPTIONS = (FusionOption("k", int, 3),)

    class Other(FUSIONS["add"]):
        OPTIONS = (FusionOption("k", int, 5),)

    assert list(declared_options({"a": A, "b": B})) == ["k"]
    with pytest.raises(TypeError, match=r"fusion 'c' declares option 'k' unlike another operator"):
        declared_options({"a": A, "c": Other})
