"""Adaptive seeds: `fusion-sweep launch SPACE --until-decided` (issue 13).

A sweep runs its space's seeds first. After each round, every comparison gets an anytime-valid
confidence sequence of its method's estimand (`fusion_sweep.analysis.sequential`: by default
the win rate P(Δ > 0 | Δ ≠ 0), exact for any Δ; `betting`/`normal-mixture`: the mean paired
Δ); the families whose comparisons are not all decided (better, worse, or, for a mean method,
equivalent within the margin) get `seed_batch` new seeds, the others none; the sweep stops when every comparison is decided or every undecided
family has `max_seeds` seeds. The confidence sequences stay valid under this optional stopping
(docs/sequential.md); fixed-n tests on the same data do not, and `stats` labels them
descriptive.

Why rounds of Tuner runs under the sweep's one parent run, not a Ray Tune Searcher that
proposes seed trials: the decision needs every trial of a round FINISHED in MLflow (the source
of truth `stats` reads), and a round boundary is exactly where Tune's grid is complete. Each
round is the ordinary launch machinery on a grid extended by seeds, so new seed trials are
ordinary trials (same keys, runs, fingerprints), the resume rule applies unchanged, and a
killed adaptive sweep resumes by replaying the same rounds: trials are deterministic, so the
replayed decisions are the same and every trial already FINISHED is found by its key and
skipped. A Searcher would keep its state in Tune's experiment directory, which a launch never
restores (sweep.py), and would have to re-derive MLflow's view anyway.

Families. The baseline fixes some variant fields (a fusion name fixes the fusion; a variant
label "encoder/pe/fusion" fixes all three): a family is one dataset plus the values of the
fields the baseline does not fix, i.e. exactly the set of arms `stats` compares with one
reference. Seeds are added to whole families, so every arm of a family keeps the same seeds
and every comparison stays paired. New seeds are the integers after the family's largest
seed, skipping the space's tuning seeds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, TextIO

import numpy as np

from fusion_sweep.analysis.sequential import (  # one home
    DEFAULT_MAX_SEEDS, DEFAULT_METHOD, DEFAULT_SEED_BATCH, SEQUENTIAL_METHODS, WIN_RATE,
    get_method, stopping_rule,
)
from fusion_sweep.analysis.settings import DEFAULT_ALPHA
from fusion_sweep.analysis.variants import Variant, parse_baseline
from fusion_sweep.plan.grid import GridPoint, key_of, points_of
from fusion_sweep.plan.space import SearchSpace


@dataclass(frozen=True)
class AdaptiveSettings:
    """`--until-decided` and its bounds; logged on the parent run (schema.ADAPTIVE tag)."""

    max_seeds: int = DEFAULT_MAX_SEEDS
    seed_batch: int = DEFAULT_SEED_BATCH
    alpha: float = DEFAULT_ALPHA
    method: str = DEFAULT_METHOD  # a fusion_sweep.analysis.sequential.SEQUENTIAL_METHODS name

    def errors(self, initial_seeds: int) -> list[str]:
        errs = []
        if not isinstance(self.seed_batch, int) or self.seed_batch < 1:
            errs.append(f"--seed-batch must be a positive integer, got {self.seed_batch!r}")
        if not isinstance(self.max_seeds, int) or self.max_seeds < initial_seeds:
            errs.append(f"--max-seeds must be an integer >= the space's {initial_seeds} seeds, "
                        f"got {self.max_seeds!r}")
        if not 0.0 < self.alpha < 1.0:
            errs.append(f"alpha must be in (0, 1), got {self.alpha!r}")
        if self.method not in SEQUENTIAL_METHODS:
            errs.append(f"--sequential-method must be one of {', '.join(SEQUENTIAL_METHODS)}, "
                        f"got {self.method!r}")
        return errs

    def to_json(self) -> str:
        return json.dumps({"max_seeds": self.max_seeds, "seed_batch": self.seed_batch,
                           "alpha": self.alpha, "method": self.method}, sort_keys=True)


@dataclass
class Family:
    """One dataset's arms compared with one reference arm, and the seeds they run."""

    dataset: str
    group: tuple  # values of the variant fields the baseline does not fix
    reference: dict[str, Any]  # the reference arm's variant (a space variant dict)
    arms: list[dict[str, Any]]  # every other arm of the family
    seeds: list[int] = field(default_factory=list)

    @property
    def key(self) -> tuple:
        return (self.dataset, *self.group)

    def variants(self) -> list[dict[str, Any]]:
        return [self.reference, *self.arms]


def variant_label(space: SearchSpace, dataset: str, variant: Mapping[str, Any]) -> str:
    """"encoder/pe/fusion" of a space variant (the encoder as its variant label)."""
    return space.trial_config(dataset, variant, 0).variant_label()


def families(space: SearchSpace) -> list[Family]:
    """The space's comparison families (see the module docstring), each with the space's
    seeds: grouped by the same comparison axis `stats` uses (`fusion_sweep.analysis.variants`)."""
    axis = parse_baseline(space.baseline)
    out: list[Family] = []
    for d in space.datasets:
        groups: dict[tuple, list[tuple[Variant, dict]]] = {}
        for v in space.variant_list():
            arm = Variant.parse(variant_label(space, d, v))
            groups.setdefault(axis.group(arm), []).append((arm, v))
        for group, members in groups.items():
            ref = [v for arm, v in members if axis.matches(arm)]
            arms = [v for arm, v in members if not axis.matches(arm)]
            if ref and arms:  # a group without the reference arm has nothing to compare
                out.append(Family(d, group, ref[0], arms, list(space.seeds)))
    return out


def family_record(space: Any, fams: list[Family]) -> dict:
    """The comparison family fixed at launch: {"m", "members": [{"dataset", "family",
    "variant", "baseline_variant"}]}, one member per comparison (arm vs its family's
    reference). Bonferroni's m is len(members) for the whole sweep, whatever `stats` shows."""
    members = [{"dataset": f.dataset, "family": list(f.key),
                "variant": variant_label(space, f.dataset, arm),
                "baseline_variant": variant_label(space, f.dataset, f.reference)}
               for f in fams for arm in f.arms]
    return {"m": len(members), "members": members}


def family_points(space: SearchSpace, fam: Family, seeds: list[int]) -> list[GridPoint]:
    """GridPoints of every arm of `fam` at `seeds`: built as the space's grid builds its
    points (`SearchSpace.trial_config`), so a new seed trial is an ordinary trial."""
    return points_of(space.trial_config(fam.dataset, v, s) for v in fam.variants() for s in seeds)


@dataclass
class AdaptiveState:
    """The adaptive part of one launch: settings, families (with their seeds so far), rounds."""

    settings: AdaptiveSettings
    families: list[Family]
    metric: str
    higher_is_better: bool
    margin: Mapping[str, float | None]  # dataset -> equivalence margin (None: never equivalent)
    reserved_seeds: frozenset[int] = frozenset()  # tuning seeds: never added
    # The multiplicity family fixed at launch (family_record): logged on the parent run
    # (schema.COMPARISON_FAMILY); `stats` reads m from it and never re-derives it.
    family: dict = field(default_factory=dict)
    rounds: int = 0
    last: list[dict] = field(default_factory=list)  # the last round's decisions, for the summary

    @classmethod
    def for_space(cls, space: SearchSpace, settings: AdaptiveSettings) -> "AdaptiveState":
        errors = settings.errors(len(space.seeds))
        if errors:
            raise ValueError("; ".join(errors))
        fams = families(space)
        if not fams:
            raise ValueError(f"--until-decided: space {space.name!r} has no comparison (every "
                             f"family needs the baseline {space.baseline!r} and another arm)")
        directions = space.metric_directions()
        return cls(settings, fams, space.metric, directions.get(space.metric, "higher") == "higher",
                   {d: space.equivalence_margin_for(d) for d in space.datasets},
                   frozenset(space.tune.seeds) if space.tune is not None else frozenset(),
                   family_record(space, fams))

    @property
    def n_comparisons(self) -> int:
        """The multiplicity family: every comparison of the sweep, fixed from the start."""
        return sum(len(f.arms) for f in self.families)

    def describe(self) -> str:
        s = self.settings
        how = get_method(s.method)
        return (f"adaptive seeds (--until-decided): {len(self.families)} families, "
                f"{self.n_comparisons} comparisons; +{s.seed_batch} seeds per round to each "
                f"undecided family, at most {s.max_seeds} seeds; anytime-valid {s.method} "
                f"confidence sequences of the {how.estimand} at alpha {s.alpha} (Bonferroni "
                f"over the {self.n_comparisons} comparisons; {how.assumption})"
                + ("" if how.decides_equivalence else
                   "; equivalence is not decided by this method, so a family whose arms do "
                   "not differ runs to --max-seeds"))

    def next_seeds(self, fam: Family) -> list[int]:
        """The next `seed_batch` seeds of a family, capped at `max_seeds` in all."""
        room = self.settings.max_seeds - len(fam.seeds)
        out, s = [], max(fam.seeds) + 1
        while len(out) < min(self.settings.seed_batch, room):
            if s not in self.reserved_seeds:
                out.append(s)
            s += 1
        return out


def family_deltas(space: SearchSpace, fam: Family, values: Mapping[str, float]
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{arm label: (seeds (n,), Δ = arm − reference (n,))} over the seeds both have finished."""
    ref_label = variant_label(space, fam.dataset, fam.reference)
    ref_keys = {s: key_of(space.trial_config(fam.dataset, fam.reference, s)) for s in fam.seeds}
    out = {}
    for arm in fam.arms:
        seeds, deltas = [], []
        for s in fam.seeds:
            a, b = key_of(space.trial_config(fam.dataset, arm, s)), ref_keys[s]
            if a in values and b in values:
                seeds.append(s)
                deltas.append(values[a] - values[b])
        out[f"{variant_label(space, fam.dataset, arm)} vs {ref_label}"] = (
            np.asarray(seeds, dtype=int), np.asarray(deltas, dtype=float))
    return out


def next_round(state: AdaptiveState, space: SearchSpace, values: Mapping[str, float],
               out: TextIO) -> list[GridPoint]:
    """Decide every comparison on what has finished (`fusion_sweep.analysis.sequential.stopping_rule`,
    the rule benchmarks/sequential_validity.py simulates); print the round's decisions; extend
    the undecided families' seeds and return their new grid points ([] = the sweep is done).

    values: {trial key: the metric} of the sweep's finished trials with a finite metric
    (`tracking.SweepTracker.finished_values`)."""
    deltas = {f.key: {label: d for label, (_, d) in
                      family_deltas(space, f, values).items()}
              for f in state.families}
    plan = stopping_rule(deltas, alpha=state.settings.alpha,
                         margin={f.key: state.margin.get(f.dataset) for f in state.families},
                         higher_is_better=state.higher_is_better,
                         max_seeds=state.settings.max_seeds, seed_batch=state.settings.seed_batch,
                         seeds_run={f.key: len(f.seeds) for f in state.families},
                         m=state.n_comparisons, method=state.settings.method)
    state.rounds += 1
    state.last = [{"dataset": r.family[0], "comparison": str(r.comparison), "n": r.n,
                   "estimand": r.estimand, "estimate": r.estimate, "mean_delta": r.mean_delta,
                   "wins": r.wins, "losses": r.losses, "ties": r.ties,
                   "cs_low": r.cs_low, "cs_high": r.cs_high,
                   "decision": r.decision, "decision_label": r.decision_label}
                  for r in plan.results]
    new_points = []
    for fam in state.families:
        seeds = state.next_seeds(fam)[:plan.seeds_to_add.get(fam.key, 0)]
        if seeds:
            new_points += family_points(space, fam, seeds)
            fam.seeds += seeds
    print(format_round(state, bool(new_points)), file=out)
    return new_points


def format_round(state: AdaptiveState, more: bool) -> str:
    """The round's decisions, each with its estimand, estimate and CS (and W/L/T seeds)."""
    how = get_method(state.settings.method)
    lines = [f"adaptive round {state.rounds}: "
             + ("adding seeds to undecided families" if more else
                "every comparison decided or out of seeds: done")
             + f" ({state.settings.method} CS of the {how.estimand}: {how.assumption})"]
    for r in state.last:
        lines.append(f"  {r['dataset']:<26} {r['comparison']:<58} n={r['n']:<3} "
                     f"{_estimate_text(r)}  CS [{r['cs_low']:+.3f}, {r['cs_high']:+.3f}]"
                     f"  mean Δ {r['mean_delta']:+.3f}  W/L/T {r['wins']}/{r['losses']}/"
                     f"{r['ties']}  {r['decision_label']} ({r['estimand']})")
    return "\n".join(lines)


def _estimate_text(r: Mapping[str, Any]) -> str:
    est = r["estimate"]
    shown = "—" if not np.isfinite(est) else (f"{est:.3f}" if r["estimand"] == WIN_RATE
                                              else f"{est:+.3f}")
    return f"{r['estimand']} {shown}"
