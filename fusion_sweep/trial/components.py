"""What a trial runs, as components: the roots of its per-component code fingerprints.

A trial's key holds one code fingerprint per component it uses (`fusion_sweep.codeprint`
hashes the code each component can run; docs/protocol.md, "Code fingerprint"):

    trainer               the training loop, batching, the classifier around the body,
                          initialisation, precision (`trainer.train_trial` and what it calls)
    data:<dataset>        the dataset pipeline (`data.load_encoded` and what it calls) and
                          that dataset's own registry entry (its values)
    data_dir:<dataset>    what a local copy holds (`data.local_identity`), when it has one
    encoder:<name>        the encoder body (`ENCODERS[name]`; ReSSFormer's C kernels with it)
    pe:<name>, fusion:<name>, optimizer:<name>, activation:<name>   the registry entry

A registry is a cut: the closure never follows it, so another entry (added or edited) is in
no other trial's fingerprint; the entry a trial uses is a root of its own component. No
Ray, no MLflow; nothing here runs inside a trial.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import fusion_sweep.schema as schema
from fusion_sweep.trial import data, optim, platform, trainer
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.data import registry
from fusion_sweep.trial.models import common, encoder, fusion, kernels, positional

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the fusion_sweep folder


def qualified(module: ModuleType, name: str) -> str:
    """'module:name' of a module-level definition (checked to exist)."""
    if not hasattr(module, name):
        raise AttributeError(f"{module.__name__} has no {name}")
    return f"{module.__name__}:{name}"


TRAINER_ROOT = qualified(trainer, "train_trial")
DATA_ROOT = qualified(data, "load_encoded")
# The registries: a trial reads one entry of each, which is then a component of its own.
REGISTRIES: tuple[str, ...] = (
    qualified(fusion, "FUSIONS"), qualified(positional, "POSITIONAL"),
    qualified(encoder, "ENCODERS"), qualified(registry, "DATASETS"),
    qualified(optim, "OPTIMIZERS"), qualified(common, "ACTIVATIONS"))
# What a trial runs only to record where it ran: the platform description, whose hash is the
# platform fingerprint, by design not part of the key (docs/protocol.md, "Where results
# hold"). In no component; the coverage test does not look beneath it.
RECORDERS: tuple[str, ...] = (qualified(platform, "describe_platform"),
                              qualified(schema, "platform_fingerprint"))
# Where one component's closure stops: the registries, the recorders and the other
# components' roots.
CUTS: tuple[str, ...] = (*REGISTRIES, *RECORDERS, DATA_ROOT)
# Methods a registry entry runs only to validate, label or size a config, never inside a
# trial (tests/test_code_components.py runs every entry and proves it): their text (error
# messages, labels, the launch's memory arithmetic) is in no fingerprint.
NON_NUMERIC_METHODS: tuple[str, ...] = ("config_errors", "validation_errors", "variant",
                                        "order_visibility", "attention_maps",
                                        "activation_floats")
# Non-Python sources a module compiles and runs (paths relative to the package folder): a
# component whose closure reaches the module hashes their bytes.
COMPILED_SOURCES: dict[str, tuple[str, ...]] = {
    kernels.__name__: tuple((kernels.SOURCE_DIR / s).relative_to(PACKAGE_DIR).as_posix()
                            for s in kernels.SOURCES)}


@dataclass(frozen=True)
class Component:
    """One component of a trial: its name, the definitions it runs ('module:name') and the
    values it reads that are not code (a registry entry's fields, a local copy's content)."""

    name: str
    roots: tuple[str, ...] = ()
    values: Any = None


def entry(name: str, obj: Any) -> Component:
    """The component of one registry entry: a class or function of the package is a root;
    anything else (torch's Adam, F.relu) is named by its import path; a dataclass instance
    (a DatasetSpec) is its class plus its field values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return Component(name, _dataclass_roots(obj), dataclasses.asdict(obj))
    return Component(name, _root(obj), None if _root(obj) else
                     f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}")


def _dataclass_roots(obj: Any) -> tuple[str, ...]:
    """The classes of a dataclass instance and of the dataclasses in its fields (a
    DatasetSpec's Artefact): their methods and properties run on the values."""
    roots = list(_root(type(obj)))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            roots += [r for r in _dataclass_roots(value) if r not in roots]
    return tuple(roots)


def _root(obj: Any) -> tuple[str, ...]:
    module = getattr(obj, "__module__", "") or ""
    if module.split(".")[0] != PACKAGE_DIR.name:
        return ()
    return (f"{module}:{obj.__qualname__.split('.')[0]}",)


def components(config: TrialConfig) -> tuple[Component, ...]:
    """The components `config` runs (module docstring), each with its roots and values."""
    spec = registry.DATASETS[config.dataset]
    data_entry = entry(f"data:{config.dataset}", spec)
    out = [Component("trainer", (TRAINER_ROOT,)),
           Component(data_entry.name, (DATA_ROOT, *data_entry.roots), data_entry.values),
           entry(f"encoder:{config.encoder}", encoder.ENCODERS[config.encoder]),
           entry(f"pe:{config.pe}", positional.POSITIONAL[config.pe]),
           entry(f"fusion:{config.fusion}", fusion.FUSIONS[config.fusion]),
           entry(f"optimizer:{config.optimizer}", optim.OPTIMIZERS[config.optimizer]),
           entry(f"activation:{config.activation}", common.ACTIVATIONS[config.activation])]
    if config.data_dir:  # keyed by what the copy holds, never by where it is
        out.append(Component(f"data_dir:{config.dataset}", (),
                             data.local_identity(config.dataset, config.data_dir,
                                                 config.cache_dir)))
    return tuple(out)
