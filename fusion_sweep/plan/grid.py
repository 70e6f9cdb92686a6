"""The plan of a sweep: its grid points, each keyed by `schema.trial_key`, and how it prints.

Shared by the launch (`fusion_sweep.launch.sweep`) and adaptive seeding (`fusion_sweep.launch.adaptive`),
which extends a plan with new seed points built the same way.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from fusion_sweep.schema import IDENTITY_FIELDS, sweep_code, trial_key
from fusion_sweep.plan.space import SearchSpace
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.plan.trialcode import TrialCode, trial_code


@dataclass(frozen=True)
class GridPoint:
    config: TrialConfig
    key: str  # `config.trial_key(code.fingerprint)`
    # The trial's code by component (`trialcode.trial_code`): what its key holds of the code.
    code: TrialCode = field(default=TrialCode({}, ""), compare=False, hash=False)

    @property
    def ident(self) -> tuple:
        """The trial's identity, in `schema.IDENTITY_FIELDS` order."""
        return tuple(self.config.identity().values())


def ident_of(config: Mapping[str, Any]) -> tuple:
    """The grid point of a Tune trial config (`{"trial": {identity field: value}}`, as the
    launch's param space holds it), in `schema.IDENTITY_FIELDS` order: `GridPoint.ident`."""
    t = config.get("trial", config)
    return tuple(int(t[f]) if f == "seed" else t[f] for f in IDENTITY_FIELDS)


def plan(space: SearchSpace) -> list[GridPoint]:
    """The grid, each point keyed by `schema.trial_key` under this checkout's code."""
    points = points_of(space.grid())
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):  # cannot happen with a validated space; guard the invariant
        raise ValueError("two grid points share a trial key; the grid has duplicates")
    return points


def points_of(configs: Iterable[TrialConfig]) -> list[GridPoint]:
    """Grid points of trial configs under this checkout's code (each trial's own components,
    `trialcode.trial_code`): the one way a point gets its key (the space's grid and an
    adaptive round's new seeds alike)."""
    out = []
    for c in configs:
        code = trial_code(c)
        out.append(GridPoint(c, c.trial_key(code.fingerprint), code))
    return out


def key_of(config: TrialConfig) -> str:
    """The trial key of one config under this checkout's code (as `points_of` keys it)."""
    return config.trial_key(trial_code(config).fingerprint)


def code_of(points: Iterable[GridPoint]) -> str:
    """The code of a sweep's grid (its parent run's code tag): `schema.sweep_code`."""
    return sweep_code([p.code.fingerprint for p in points])


def grid_hash(points: list[GridPoint]) -> str:
    """What the sweep trains, independent of the code that trains it (a code change is
    caught by the code fingerprint, with its own message and opt-in)."""
    keys = sorted(trial_key(p.config.to_dict(), "") for p in points)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


def format_grid(space: SearchSpace, points: list[GridPoint], name: str,
                column: tuple[str, list[str]] | None = None) -> str:
    """The printed grid; `column`: (header, one value per point) shown before the trial key
    (`launch --dry-run`'s GPU memory estimate)."""
    res = f"cpu={space.cpu:g}, gpu={space.gpu:g}"
    lines = [f"sweep {name!r} from {space.source}",
             f"{len(points)} trials = {len(space.datasets)} datasets × {_variant_count(space)} × "
             f"{len(space.seeds)} seeds; per trial: {res} "
             f"(torch threads {space.num_threads}); retries per trial: {space.max_failures}",
             f"baseline {space.baseline!r}, metric {space.metric!r}"
             + (f", equivalence margin {space.equivalence_margin}" if space.equivalence_margin else ""),
             ""]
    for d in space.datasets:
        hp = points_for(points, d)[0].config
        shown = {k: v for k, v in hp.hyperparameters().items()
                 if k in ("max_len", "d_model", "heads", "layers", "dim_ff", "dropout", "batch_size",
                          "epochs", "lr", "optimizer", "limit_train", "patience")}
        lines.append(f"  {d}: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    lines.append("")
    w = max(len("dataset"), *(len(p.config.dataset) for p in points))
    we = max(len("encoder"), *(len(p.ident[1]) for p in points))
    head, values = column or ("", [""] * len(points))
    wc = max(len(head), *(len(v) for v in values))
    extra = (lambda v: f"{v:>{wc}}  ") if column else (lambda v: "")
    lines.append(f"  {'#':>3}  {'dataset':<{w}}  {'encoder':<{we}}  {'pe':<13}  {'fusion':<11}  "
                 f"{'seed':>4}  {extra(head)}trial key")
    for i, (p, v) in enumerate(zip(points, values), 1):
        c = p.config
        lines.append(f"  {i:>3}  {c.dataset:<{w}}  {p.ident[1]:<{we}}  {c.pe:<13}  {c.fusion:<11}  "
                     f"{c.seed:>4}  {extra(v)}{p.key}")
    return "\n".join(lines)


def _variant_count(space: SearchSpace) -> str:
    if space.variants:
        return f"{len(space.variants)} variants"
    return f"{len(space.pes)} PEs × {len(space.fusions)} fusions"


def points_for(points: list[GridPoint], dataset: str) -> list[GridPoint]:
    return [p for p in points if p.config.dataset == dataset]
