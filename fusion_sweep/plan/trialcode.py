"""A trial's code fingerprint: one fingerprint per component it runs (docs/protocol.md).

`trial_code(config)` fingerprints each of the trial's components (trial/components.py) from
the package's source (fusion_sweep/codeprint.py) and hashes the map
(`schema.code_fingerprint`); the trial key holds that hash, the trial run logs the map.
Computed where a key is needed (the launch's plan, its dry run, a worker's check), never
inside a trial; each component is fingerprinted once per process.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from fusion_sweep.codeprint import Package
from fusion_sweep.schema import code_fingerprint
from fusion_sweep.trial.components import (COMPILED_SOURCES, CUTS, NON_NUMERIC_METHODS,
                                           PACKAGE_DIR, Component, components)
from fusion_sweep.trial.config import TrialConfig

_PACKAGES: dict[Path, Package] = {}
_FINGERPRINTS: dict[tuple, str] = {}


@dataclass(frozen=True)
class TrialCode:
    """A trial's code: component -> fingerprint, and their hash (the key's code part)."""

    components: Mapping[str, str]
    fingerprint: str

    def tag(self) -> str:
        """The map as the trial run's CODE_COMPONENTS tag (JSON)."""
        return json.dumps(dict(self.components), sort_keys=True)


def package(package_dir: Path | None = None) -> Package:
    """The package's parsed source (this checkout's, or a copy's at `package_dir`)."""
    root = Path(package_dir or PACKAGE_DIR).resolve()
    if root not in _PACKAGES:
        _PACKAGES[root] = Package(root, NON_NUMERIC_METHODS)
    return _PACKAGES[root]


def forget() -> None:
    """Parse and fingerprint afresh (tests that edit a package copy between two reads)."""
    _PACKAGES.clear()
    _FINGERPRINTS.clear()


def component_fingerprint(component: Component, package_dir: Path | None = None) -> str:
    pkg = package(package_dir)
    key = (pkg.root, component.roots, json.dumps(component.values, sort_keys=True, default=str))
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = pkg.fingerprint(component.roots, CUTS, component.values,
                                             COMPILED_SOURCES)
    return _FINGERPRINTS[key]


def trial_code(config: TrialConfig, package_dir: Path | None = None) -> TrialCode:
    """The code fingerprint of `config`'s trial, by component."""
    fps = {c.name: component_fingerprint(c, package_dir) for c in components(config)}
    return TrialCode(fps, code_fingerprint(fps))
