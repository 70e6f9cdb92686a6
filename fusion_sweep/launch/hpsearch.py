"""The optional hyperparameter search before a controlled sweep: `fusion-sweep tune`.

Optuna (through Ray Tune's `OptunaSearch`) searches the space's `tune.search` ranges on the
validation accuracy of the baseline fusion, on the `tune.seeds` (disjoint from the sweep's
seeds), with `evaluate_test=False` so the test split is never read, then writes a frozen
space whose values are fixed for every fusion. Named "hpsearch" in the code so that "tune"
always means Ray Tune.
"""
from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, TextIO

from fusion_sweep.launch import signals
from fusion_sweep.raytune.setup import check_ray_address, configure_ray_env, init_ray, resolve_storage
from fusion_sweep.plan.space import DISTRIBUTIONS, SearchSpace, dump_space, load_space
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.trainer import train_trial
from fusion_sweep.errors import UserError

SEARCH_METRIC = "mean_val_acc"


def evaluate_params(params: Mapping[str, Any], *, dataset: str, pe: str, fusion: str,
                    seeds: tuple[int, ...], base: Mapping[str, Any], num_threads: int,
                    train: Callable | None = None) -> dict[str, float]:
    """Mean best validation accuracy of `params` over the tuning seeds.

    Every config has `evaluate_test=False`: the trainer never touches the test split.
    """
    train = train or train_trial
    out: dict[str, float] = {}
    accs = []
    for seed in seeds:
        cfg = TrialConfig.build(dataset, pe=pe, fusion=fusion, seed=seed, num_threads=num_threads,
                                evaluate_test=False, **{**base, **params})
        r = train(cfg)
        accs.append(r.best_val_acc)
        out[f"val_acc_seed{seed}"] = float(r.best_val_acc)
    out[SEARCH_METRIC] = float(sum(accs) / len(accs))
    return out


def search_objective(params: dict, **kw) -> None:
    """Ray Tune function trainable for `fusion-sweep tune`."""
    from ray import tune

    tune.report(evaluate_params(params, **kw))


def _domain(spec: Mapping[str, list]):
    (dist, args), = spec.items()
    return DISTRIBUTIONS[dist].sampler(args)


def _in_range(value: Any, spec: Mapping[str, list]) -> bool:
    (dist, args), = spec.items()
    return DISTRIBUTIONS[dist].contains(value, args)


def search_hyperparameters(space_ref: str, *, budget: int | None = None, output: str | None = None,
                           address: str | None = None, storage: str | None = None,
                           max_concurrent: int | None = None, out: TextIO | None = None) -> Path:
    """`fusion-sweep tune`: Optuna on validation accuracy of the baseline, then a frozen space."""
    out = out if out is not None else sys.stdout  # late: a captured stdout may be replaced
    space, budget, out_path = _checked_inputs(space_ref, budget, output)
    pe = space.tune.pe or space.pes[0]
    address = check_ray_address(address)
    storage_path = resolve_storage(storage)
    configure_ray_env(address)
    tuned: dict[str, dict[str, Any]] = {}
    provenance: dict[str, Any] = {
        "from": space.source, "budget_per_dataset": budget, "seeds": list(space.tune.seeds),
        "fusion": space.baseline, "pe": pe, "metric": f"{SEARCH_METRIC} (best validation accuracy, "
        f"mean over tuning seeds; the test split is never read)", "search": space.tune.search,
        "best": {}}
    t0 = time.time()
    with signals.interrupting():
        started = init_ray(address, out)
        signals.reclaim()
        try:
            for dataset in space.datasets:
                tuned[dataset], provenance["best"][dataset] = _tune_dataset(
                    space, dataset, pe, budget, storage_path, max_concurrent, out)
        finally:
            if started or address is not None:
                import ray

                ray.shutdown()
    provenance["seconds"] = round(time.time() - t0, 1)
    return _write_frozen(space, space_ref, budget, tuned, provenance, out_path, out)


def _checked_inputs(space_ref: str, budget: int | None, output: str | None
                    ) -> tuple[SearchSpace, int, Path]:
    """The space (it must have a `tune:` section), the budget per dataset, the output file."""
    space = load_space(space_ref)
    if space.tune is None:
        raise UserError(f"{space.source}: no `tune:` section; add e.g. tune: {{seeds: [100, 101], "
                         f"budget: 8, search: {{lr: {{loguniform: [1.0e-4, 3.0e-3]}}}}}}")
    if budget is not None and budget < 1:
        raise UserError(f"--budget must be >= 1, got {budget}")
    out_path = Path(output) if output else Path.cwd() / f"{space.name}-tuned.yaml"
    if not out_path.parent.is_dir():
        raise UserError(f"--output {out_path}: directory {out_path.parent} does not exist")
    return space, budget or space.tune.budget, out_path


def _tune_dataset(space: SearchSpace, dataset: str, pe: str, budget: int, storage_path: str,
                  max_concurrent: int | None, out: TextIO) -> tuple[dict[str, Any], dict[str, Any]]:
    """One dataset's Optuna search -> (the best values, {val_acc, trials} for the provenance)."""
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    base = space.overrides_for(dataset)
    current = TrialConfig.build(dataset, **base).to_dict()
    start = {k: current[k] for k in space.tune.search}
    searcher = OptunaSearch(
        metric=SEARCH_METRIC, mode="max", seed=0,
        points_to_evaluate=[start] if all(_in_range(start[k], v)
                                          for k, v in space.tune.search.items()) else None)
    trainable = tune.with_resources(
        tune.with_parameters(search_objective, dataset=dataset, pe=pe, fusion=space.baseline,
                             seeds=tuple(space.tune.seeds), base=base,
                             num_threads=space.num_threads),
        {"cpu": space.cpu, "gpu": space.gpu})
    print(f"tuning {dataset}: {budget} Optuna trials × {len(space.tune.seeds)} seeds of "
          f"{space.baseline}/{pe}", file=out)
    results = tune.Tuner(
        trainable,
        param_space={k: _domain(v) for k, v in space.tune.search.items()},
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=budget,
                                    max_concurrent_trials=max_concurrent, reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"{space.name}-tune-{dataset}-{uuid.uuid4().hex[:6]}",
            storage_path=storage_path, verbose=1),  # Tune's own output: each trial's end
    ).fit()
    ok = [r for r in results if r.error is None and r.metrics and SEARCH_METRIC in r.metrics]
    if not ok:
        raise RuntimeError(f"tuning {dataset}: every trial failed; first error: "
                           f"{next((r.error for r in results if r.error), 'no result')}")
    best = max(ok, key=lambda r: r.metrics[SEARCH_METRIC])
    values = {k: best.config[k] for k in space.tune.search}
    print(f"  best {dataset}: {values}  val_acc={best.metrics[SEARCH_METRIC]:.4f}", file=out)
    return values, {"val_acc": round(best.metrics[SEARCH_METRIC], 6), "trials": len(ok)}


def _write_frozen(space: SearchSpace, space_ref: str, budget: int,
                  tuned: Mapping[str, Mapping[str, Any]], provenance: dict[str, Any],
                  out_path: Path, out: TextIO) -> Path:
    """The space with the tuned values fixed for every fusion, written and re-validated."""
    hp = {k: dict(v) for k, v in space.hyperparameters.items()}
    for d, values in tuned.items():
        hp.setdefault(d, {}).update(values)
    frozen = dataclasses.replace(space, name=f"{space.name}-tuned", hyperparameters=hp, tune=None,
                                 tuned=provenance,
                                 description=(f"{space.description} " if space.description else "")
                                 + f"Hyperparameters tuned by `fusion-sweep tune {space_ref}`, then frozen.")
    dump_space(frozen, out_path, header=[
        f"Frozen by `fusion-sweep tune {space_ref} --budget {budget}`: the values below are fixed",
        "for every fusion (paper protocol); tuned on validation accuracy, tuning seeds only."])
    load_space(out_path)  # the written file must validate
    print(f"wrote {out_path}\nrun it with: fusion-sweep launch {out_path}", file=out)
    return out_path
