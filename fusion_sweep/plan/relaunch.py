"""What a relaunch does with a sweep's finished trials: which it keeps, which it retrains
because the code of one of their components changed (grouped by that component), and which
old runs the retrained trials supersede.

The resume rule is unchanged (`schema.run_of_key`, `tracking.SweepTracker.trial_status`): a
grid point whose key has a FINISHED run is kept. A point without one whose identity has a
FINISHED run under another key was trained by other code: its run's component map
(`schema.CODE_COMPONENTS`) says which component changed. `launch` and `launch --dry-run`
print the plan before anything trains (`CodePlan.lines`); `launch` refuses it without
`--allow-code-change`, and with it marks each superseded run (`schema.SUPERSEDED`), never
deleting one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from fusion_sweep.plan.grid import GridPoint
from fusion_sweep.schema import (CODE_COMPONENTS, FINISHED, IDENTITY_FIELDS, IDENTITY_TAG,
                                 SUPERSEDED, TRIAL_KEY, changed_components, component_label,
                                 parse_components)

# Why a trial retrains when its old run carries no component map (logged before them).
LEGACY = "trained before per-component code fingerprints"


@dataclass(frozen=True)
class Retrain:
    """A grid point whose identity finished under another key: its old run and why."""

    point: GridPoint
    old_run: str
    reason: str


@dataclass(frozen=True)
class CodePlan:
    """A relaunch's decision on a sweep's trials (`code_plan`)."""

    total: int
    kept: int
    retrain: tuple[Retrain, ...] = ()
    superseded: Mapping[str, str] = field(default_factory=dict)  # old run id -> new key

    def groups(self) -> list[tuple[str, int]]:
        """(reason, trial count), the largest group first."""
        counts: dict[str, int] = {}
        for r in self.retrain:
            counts[r.reason] = counts.get(r.reason, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def summary(self) -> str:
        """'24 of 360 trials: fusion gate-cnn's code changed; 336 kept'."""
        parts = [f"{n} of {self.total} trials: {reason}" for reason, n in self.groups()]
        return "; ".join([*parts, f"{self.kept} kept"])

    def reason_of(self, point: GridPoint) -> Retrain | None:
        return next((r for r in self.retrain if r.point.key == point.key), None)


def reason(old: Mapping[str, str] | None, new: Mapping[str, str]) -> str:
    """Why a trial's key moved, in words: the components whose code (or, for a local copy,
    content) differs between its old run's map and its new one."""
    if old is None:
        return LEGACY
    changed = changed_components(old, new)
    if not changed:
        return "its key changed with the same code (the key's scheme changed)"
    words = [f"{component_label(n)} changed" if n.startswith("data_dir:")
             else f"{component_label(n)}'s code changed" for n in changed]
    return ", ".join(words)


def _ident(tags: Mapping[str, str]) -> tuple | None:
    try:
        ident = json.loads(tags.get(IDENTITY_TAG) or "")
        return tuple(int(ident[f]) if f == "seed" else ident[f] for f in IDENTITY_FIELDS)
    except (ValueError, KeyError, TypeError):
        return None


def code_plan(tracker: Any, name: str, points: list[GridPoint]) -> CodePlan:
    """Kept, retrained (with the changed components) and superseded trials of sweep `name`
    if `points` were launched now (`tracker`: a `tracking.SweepTracker`)."""
    finished: dict[tuple, list[Any]] = {}
    for r in tracker.trial_runs(name):  # oldest first
        ident = _ident(r.data.tags)
        if r.info.status == FINISHED and ident is not None:
            finished.setdefault(ident, []).append(r)
    kept, retrain, superseded = 0, [], {}
    for p in points:
        if tracker.trial_status(name, p.key)[0] == FINISHED:
            kept += 1
            continue
        olds = [r for r in finished.get(p.ident, []) if r.data.tags.get(TRIAL_KEY) != p.key]
        if not olds:
            continue  # never finished: a new trial, not a code change
        old = olds[-1]
        why = reason(parse_components(old.data.tags.get(CODE_COMPONENTS)), p.code.components)
        retrain.append(Retrain(p, old.info.run_id, why))
        superseded.update({r.info.run_id: p.key for r in olds if not r.data.tags.get(SUPERSEDED)})
    return CodePlan(len(points), kept, tuple(retrain), superseded)
