"""Search spaces: the declarative YAML that says which trials a sweep runs.

A search space names the grid `datasets × variants × seeds` (variants: `pes × fusions` with the
standard encoder, or an explicit `variants:` list of (encoder, pe, fusion, switches)), the fixed
hyperparameters per dataset, the per-trial resources, and what the analysis compares
(baseline fusion, metric, optional equivalence margin). An optional `tune:` section
declares ranges for `fusion-sweep tune` (Optuna), which writes a new, frozen space.

Validation collects *every* problem before reporting, each prefixed with the file and
the key, and naming the valid choices. Nothing here imports Ray or MLflow.

Schema (all keys except `name`, `datasets`, `seeds` and either `pes` + `fusions` or `variants`
are optional)::

    name: default                    # the sweep name (MLflow parent run, Ray Tune experiment)
    description: free text
    experiment: fusion-sweep         # MLflow experiment
    datasets: [synthetic-short]
    pes: [sinusoidal]
    fusions: [add, concat]
    variants:                        # instead of pes × fusions: an explicit list, each with
      - {pe: sinusoidal, fusion: add}                  # encoder (default standard) and
      - {encoder: ressformer, pe: none, fusion: add}   # that encoder's fields (soes, ...)
      - {encoder: ressformer, pe: none, fusion: add, asam: false}
    seeds: [0, 1, 2, 3, 4]
    hyperparameters:                 # TrialConfig fields; dataset defaults apply first
      all: {epochs: 3}               # every dataset
      synthetic-short: {d_model: 64} # this dataset (wins over `all`)
    resources: {cpu: 1, gpu: 0}      # per trial; gpu may be fractional (0.25 = 4 per GPU);
                                     # memory_gb: RAM per trial (default: estimated);
                                     # pin every trial to one platform (pairs must share
                                     # it): accelerator_type: A10G (Ray's GPU type) and/or
                                     # node_label: {fusion-sweep/platform: g5-a10g}
    max_failures: 2                  # Ray Tune retries per trial
    baseline: add                    # the fusion every other fusion is compared with, or a
                                     # variant label "encoder/pe/fusion" (every other variant)
    metric: test_acc
    equivalence_margin: null         # float, or {dataset: float}
    directions: {}                   # {metric: higher|lower}; known metrics need none
    tune:                            # for `fusion-sweep tune`
      seeds: [100, 101]              # must not overlap `seeds`
      budget: 8                      # Optuna trials per dataset
      search:
        lr: {loguniform: [1.0e-4, 3.0e-3]}
        dropout: {uniform: [0.0, 0.3]}
        batch_size: {choice: [16, 32, 64]}
"""
from __future__ import annotations

import itertools
import math
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from fusion_sweep.schema import (DEFAULT_BASELINE, DEFAULT_EXPERIMENT, DEFAULT_METRIC, DIRECTIONS, IDENTITY_FIELDS,
                                 METRIC_DIRECTIONS, TASK_METRICS)
from fusion_sweep.errors import UserError, choices, did_you_mean
from fusion_sweep.plan.space_files import SPACE_DIR, shipped_spaces
from fusion_sweep.trial.config import ConfigError, TrialConfig
from fusion_sweep.trial.data.registry import DATASETS
from fusion_sweep.trial.models.encoder import ENCODERS
from fusion_sweep.trial.models.fusion import FUSIONS
from fusion_sweep.trial.models.positional import POSITIONAL


TOP_LEVEL_KEYS = (
    "name", "description", "experiment", "datasets", "pes", "fusions", "variants", "seeds",
    "hyperparameters", "resources", "max_failures", "baseline", "metric",
    "equivalence_margin", "directions", "tune", "tuned",
)
REQUIRED_KEYS = ("name", "datasets", "seeds")  # and `pes` + `fusions`, or `variants`
VARIANT_KEYS = ("encoder", "pe", "fusion")  # plus the encoders' own fields (OPTION_FIELDS)
RESOURCE_KEYS = ("cpu", "gpu", "memory_gb", "accelerator_type", "node_label")
# A Ray accelerator type ("A10G", "L4", "H100", "RTX-PRO-6000": ray.util.accelerators) and a
# node label's key ([prefix/]name, Ray's rule) and value.
_ACCELERATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
DEFAULT_RESOURCES: dict[str, float] = {"cpu": 1, "gpu": 0}  # per trial
TUNE_KEYS = ("seeds", "budget", "search", "pe")


@dataclass(frozen=True)
class Distribution:
    """One `tune.search` distribution: its argument rule, its extreme values and its Ray Tune
    sampler. The registry below is the only place distribution kinds are named."""

    expects: str  # the argument rule, for error messages
    tune_name: str  # ray.tune's sampler function of the same meaning

    def valid(self, args: list) -> bool:
        if self.tune_name == "choice":
            return bool(args)
        ok = len(args) == 2 and all(_is_num(a) for a in args) and args[0] < args[1]
        if self.tune_name == "loguniform":
            ok = ok and args[0] > 0
        if self.tune_name == "randint":
            ok = ok and all(_is_int(a) for a in args)
        return ok

    def probes(self, args: list) -> list:
        """Every value, or both extremes, that the distribution can produce."""
        if self.tune_name == "choice":
            return list(args)
        return [args[0], args[1] - 1 if self.tune_name == "randint" else args[1]]

    def contains(self, value: Any, args: list) -> bool:
        if self.tune_name == "choice":
            return value in args
        lo, hi = args
        return lo <= value < hi if self.tune_name == "randint" else lo <= value <= hi

    def sampler(self, args: list) -> Any:
        from ray import tune

        fn = getattr(tune, self.tune_name)
        return fn(args) if self.tune_name == "choice" else fn(*args)


DISTRIBUTIONS: dict[str, Distribution] = {
    "loguniform": Distribution("[low, high], 0 < low < high", "loguniform"),
    "uniform": Distribution("[low, high], low < high", "uniform"),
    "randint": Distribution("[low, high), integers, low < high", "randint"),
    "choice": Distribution("[v1, v2, ...], non-empty", "choice"),
}
METRICS = ("test_acc", "test_macro_f1", "best_val_acc")
# Fields a space may not set: the grid sets the identity fields, `resources.cpu` sets
# the thread count, and `fusion-sweep tune` alone turns test evaluation off.
RESERVED_FIELDS = (*IDENTITY_FIELDS, "num_threads", "evaluate_test")


class SpaceError(UserError):
    """A search space failed validation; `errors` lists every problem."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        n = len(errors)
        super().__init__(
            f"{n} error{'s' if n != 1 else ''} in search space {source}:\n  - "
            + "\n  - ".join(errors)
        )


@dataclass(frozen=True)
class HPSearchSpec:
    seeds: tuple[int, ...]
    budget: int
    search: dict[str, dict[str, list]]
    pe: str | None = None  # the PE tuned with; default: the space's first


@dataclass(frozen=True)
class SearchSpace:
    name: str
    datasets: tuple[str, ...]
    pes: tuple[str, ...]
    fusions: tuple[str, ...]
    seeds: tuple[int, ...]
    hyperparameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    max_failures: int = 2
    baseline: str = DEFAULT_BASELINE  # `stats`' defaults: one home (schema.py)
    metric: str = DEFAULT_METRIC
    equivalence_margin: float | dict[str, float] | None = None
    directions: dict[str, str] = field(default_factory=dict)  # on top of METRIC_DIRECTIONS
    experiment: str = DEFAULT_EXPERIMENT
    description: str = ""
    tune: HPSearchSpec | None = None
    tuned: dict[str, Any] | None = None
    # Explicit variants (the YAML's `variants:`); empty = pes × fusions, standard encoder.
    variants: tuple[dict[str, Any], ...] = ()
    source: str = "<dict>"  # file the space came from
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ the grid
    @property
    def cpu(self) -> float:
        return float(self.resources.get("cpu", DEFAULT_RESOURCES["cpu"]))

    @property
    def gpu(self) -> float:
        return float(self.resources.get("gpu", DEFAULT_RESOURCES["gpu"]))

    @property
    def accelerator_type(self) -> str | None:
        """The Ray accelerator type every trial is pinned to (`resources.accelerator_type`)."""
        return self.resources.get("accelerator_type")

    @property
    def node_label(self) -> dict[str, str]:
        """The Ray node labels every trial's node must carry (`resources.node_label`)."""
        return dict(self.resources.get("node_label") or {})

    @property
    def memory_gb(self) -> float | None:
        """Declared GiB per trial, or None (then `memory.trial_memory_bytes` estimates it)."""
        m = self.resources.get("memory_gb")
        return None if m is None else float(m)

    @property
    def num_threads(self) -> int:
        """torch threads per trial: its whole CPU budget (at least 1)."""
        return max(1, int(math.floor(self.cpu)))

    def overrides_for(self, dataset: str) -> dict[str, Any]:
        out = dict(self.hyperparameters.get("all", {}))
        out.update(self.hyperparameters.get(dataset, {}))
        return out

    def variant_list(self) -> list[dict[str, Any]]:
        """The compared variants: the explicit list, else pes × fusions (standard encoder)."""
        if self.variants:
            return [dict(v) for v in self.variants]
        return [{"pe": p, "fusion": f} for p, f in itertools.product(self.pes, self.fusions)]

    def trial_config(self, dataset: str, variant: Mapping[str, Any], seed: int) -> TrialConfig:
        """The TrialConfig of one grid point (also of a seed adaptive seeding adds)."""
        return TrialConfig.build(dataset, space_all=self.hyperparameters.get("all"),
                                 space_dataset=self.hyperparameters.get(dataset),
                                 **variant, seed=seed, num_threads=self.num_threads)

    def grid(self) -> list[TrialConfig]:
        """One `TrialConfig` per (dataset, variant, seed), in that nesting order."""
        return [self.trial_config(d, v, s) for d, v, s in
                itertools.product(self.datasets, self.variant_list(), self.seeds)]

    def __len__(self) -> int:
        return len(self.datasets) * len(self.variant_list()) * len(self.seeds)

    def metric_directions(self) -> dict[str, str]:
        """Every known metric's direction: the schema's, then this space's `directions`."""
        return {**METRIC_DIRECTIONS, **self.directions}

    def equivalence_margin_for(self, dataset: str) -> float | None:
        m = self.equivalence_margin
        if isinstance(m, Mapping):
            return m.get(dataset)
        return m

    # ----------------------------------------------------------------- writing
    def to_yaml_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if self.description:
            d["description"] = self.description
        if self.experiment != DEFAULT_EXPERIMENT:
            d["experiment"] = self.experiment
        d["datasets"] = list(self.datasets)
        if self.variants:
            d["variants"] = [dict(v) for v in self.variants]
        else:
            d.update(pes=list(self.pes), fusions=list(self.fusions))
        d.update(seeds=list(self.seeds),
                 hyperparameters={k: dict(v) for k, v in self.hyperparameters.items()},
                 resources=dict(self.resources), max_failures=self.max_failures,
                 baseline=self.baseline, metric=self.metric,
                 equivalence_margin=self.equivalence_margin)
        if self.directions:
            d["directions"] = dict(self.directions)
        if self.tune is not None:
            t: dict[str, Any] = {"seeds": list(self.tune.seeds), "budget": self.tune.budget,
                                 "search": self.tune.search}
            if self.tune.pe:
                t["pe"] = self.tune.pe
            d["tune"] = t
        if self.tuned is not None:
            d["tuned"] = self.tuned
        return d


def _default(name: str) -> Any:
    """A space key's default when the file omits it: the SearchSpace field's default (the
    dataclass is the one home of the space's defaults; `_validate` reads them from it)."""
    f = SearchSpace.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


# ---------------------------------------------------------------------- loading
def resolve_space_path(name_or_path: str | Path) -> Path:
    """A path to a YAML file, or the name of a shipped space (`default` → search_spaces/default.yaml)."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p.resolve()
    s = str(name_or_path)
    if "/" not in s and not s.endswith((".yaml", ".yml")):
        cand = SPACE_DIR / f"{s}.yaml"
        if cand.is_file():
            return cand
        raise SpaceError(s, [
            f"no search space named {s!r}{did_you_mean(s, shipped_spaces())}; shipped spaces: "
            f"{choices(shipped_spaces())} (in {SPACE_DIR}), or pass a path to a YAML file"
        ])
    raise SpaceError(s, [f"file not found: {s}; shipped spaces: {choices(shipped_spaces())}"])


def launch_command(space_ref: str) -> str:
    return f"fusion-sweep launch {space_ref}"


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Read and validate a search space; raises `SpaceError` listing every problem."""
    path = resolve_space_path(name_or_path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpaceError(str(path), [f"cannot read: {e}"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:  # one line: where, what (yaml's own text spans several)
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(e, "problem", None) or str(e).replace("\n", " ")
        if isinstance(e, yaml.constructor.ConstructorError):
            what += ("; only plain YAML data is read (yaml.safe_load): tags that build Python "
                     "objects or run code are refused")
        raise SpaceError(str(path), [f"not valid YAML: {where}{what}"]) from None
    return parse_space(raw, source=str(path))


def parse_space(raw: Any, source: str = "<dict>") -> SearchSpace:
    errors: list[str] = []
    space = _validate(raw, source, errors)
    if errors or space is None:
        seen: set[str] = set()
        uniq = [e for e in errors if not (e in seen or seen.add(e))]
        raise SpaceError(source, [f"{source}: {e}" for e in uniq])
    return space


def dump_space(space: SearchSpace, path: str | Path, header: Iterable[str] = ()) -> Path:
    """Write `space` as YAML whose first line is the command that launches it."""
    path = Path(path)
    ref = path.stem if path.resolve().parent == SPACE_DIR.resolve() else str(path)
    lines = [f"# {launch_command(ref)}"] + [f"# {h}" for h in header]
    body = yaml.safe_dump(space.to_yaml_dict(), sort_keys=False, default_flow_style=None)
    path.write_text("\n".join(lines) + "\n" + body)
    return path


# ------------------------------------------------------------------- validation
def _unknown_keys(d: Mapping, valid: Iterable[str], where: str, errors: list[str]) -> None:
    valid = list(valid)
    for k in d:
        if k not in valid:
            errors.append(f"{where}{k}: unknown key{did_you_mean(k, valid)}; valid keys: {choices(valid)}")


def _name_list(raw: Mapping, key: str, registry: Iterable[str], errors: list[str]) -> list[str]:
    registry = sorted(registry)
    v = raw.get(key)
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v:
        errors.append(f"{key}: must be a non-empty list of names from {choices(registry)}, "
                      f"got {v!r}")
        return []
    out = []
    for i, name in enumerate(v):
        if name not in registry:
            errors.append(f"{key}[{i}]: unknown {key[:-1]} {name!r}{did_you_mean(name, registry)}; "
                          f"choose from {choices(registry)}")
        elif name in out:
            errors.append(f"{key}[{i}]: {name!r} is listed twice")
        else:
            out.append(name)
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _seed_list(v: Any, key: str, errors: list[str]) -> list[int]:
    if not isinstance(v, list) or not v:
        errors.append(f"{key}: must be a non-empty list of non-negative integers, got {v!r}")
        return []
    out = []
    for i, s in enumerate(v):
        if not _is_int(s) or s < 0:
            errors.append(f"{key}[{i}]: seeds are non-negative integers, got {s!r}")
        elif s in out:
            errors.append(f"{key}[{i}]: seed {s} is listed twice")
        else:
            out.append(s)
    return out


def _build_errors(dataset: str, threads: int, overrides: Mapping[str, Any]) -> list[str]:
    """The problems `TrialConfig.build` finds, one message per problem."""
    try:
        TrialConfig.build(dataset, num_threads=threads, **overrides)
    except ConfigError as e:
        return e.errors
    except ValueError as e:  # unknown field or dataset: one message
        return [str(e)]
    return []


def _validate(raw: Any, source: str, errors: list[str]) -> SearchSpace | None:
    """Every problem of a raw space appended to `errors`; the space when there are none."""
    if not isinstance(raw, Mapping):
        errors.append(f"the file must hold a mapping with keys {choices(TOP_LEVEL_KEYS)}, "
                      f"got {type(raw).__name__}")
        return None
    name = _validate_header(raw, errors)
    datasets = _name_list(raw, "datasets", DATASETS, errors)
    if "variants" in raw:
        for k in ("pes", "fusions"):
            if k in raw:
                errors.append(f"{k}: give either `variants` or `pes` + `fusions`, not both")
        variants = _validate_variants(raw["variants"], errors)
        pes = list(dict.fromkeys(v["pe"] for v in variants))
        fusions = list(dict.fromkeys(v["fusion"] for v in variants))
    else:
        for k in ("pes", "fusions"):
            if k not in raw:
                errors.append(f"{k}: missing required key (or give `variants` instead of "
                              f"`pes` + `fusions`)")
        pes = _name_list(raw, "pes", POSITIONAL, errors)
        fusions = _name_list(raw, "fusions", FUSIONS, errors)
        variants = [{"pe": p, "fusion": f} for p, f in itertools.product(pes, fusions)]
    seeds = _seed_list(raw["seeds"], "seeds", errors) if "seeds" in raw else []
    resources, max_failures = _validate_resources(raw, errors)
    hparams = _validate_hyperparameters(raw, datasets, errors)
    cpu = resources["cpu"]
    threads = max(1, int(math.floor(cpu))) if _is_num(cpu) and cpu > 0 else 1
    base_errors = _validate_grid_points(datasets, variants, hparams, threads, errors,
                                        "variants" if "variants" in raw else "pes × fusions")
    labels = _variant_labels(datasets, variants, hparams, threads) if not errors else None
    baseline, metric, margin, directions = _validate_comparison(raw, datasets, fusions, labels,
                                                                errors)

    tune_spec = None
    if raw.get("tune") is not None:
        allowed_fields = [f for f in TrialConfig.field_names() if f not in RESERVED_FIELDS]
        if "/" in str(baseline):
            errors.append(f"tune: `fusion-sweep tune` tunes the baseline fusion; baseline "
                          f"{baseline!r} is a variant label: give a fusion name as the baseline "
                          f"or drop the tune section")
        else:
            tune_spec = _validate_tune(raw["tune"], seeds, datasets, pes, baseline, hparams,
                                       allowed_fields, threads, errors, base_errors)
    tuned = raw.get("tuned")
    if tuned is not None and not isinstance(tuned, Mapping):
        errors.append(f"tuned: must be a mapping (provenance written by `fusion-sweep tune`), got {tuned!r}")

    if errors:
        return None
    return SearchSpace(
        name=name, datasets=tuple(datasets), pes=tuple(pes), fusions=tuple(fusions),
        seeds=tuple(seeds), hyperparameters=hparams, resources=resources,
        max_failures=max_failures, baseline=baseline, metric=metric,
        equivalence_margin=dict(margin) if isinstance(margin, Mapping) else margin,
        directions=dict(directions),
        experiment=raw.get("experiment", _default("experiment")),
        description=raw.get("description", _default("description")),
        tune=tune_spec, tuned=dict(tuned) if tuned else None, source=source, raw=dict(raw),
        variants=tuple(dict(v) for v in variants) if "variants" in raw else (),
    )


def _validate_variants(v: Any, errors: list[str]) -> list[dict[str, Any]]:
    """`variants: [{encoder?, pe, fusion, <encoder field>...}]` -> the well-formed entries."""
    # every encoder's own fields (its registry entry's OPTION_FIELDS), in registry order
    encoder_fields = dict.fromkeys(f for e in ENCODERS.values() for f in e.OPTION_FIELDS)
    valid = [*VARIANT_KEYS, *encoder_fields]
    if not isinstance(v, list) or not v:
        errors.append(f"variants: must be a non-empty list of mappings with keys from {choices(valid)}, "
                      f"got {v!r}")
        return []
    out: list[dict[str, Any]] = []
    for i, item in enumerate(v):
        where = f"variants[{i}]"
        if not isinstance(item, Mapping):
            errors.append(f"{where}: must be a mapping with keys from {choices(valid)}, got {item!r}")
            continue
        _unknown_keys(item, valid, f"{where}.", errors)
        missing = [k for k in ("pe", "fusion") if k not in item]
        if missing:
            errors.append(f"{where}: missing required key(s) {choices(missing)}")
            continue
        entry = {k: item[k] for k in valid if k in item}
        if entry in out:
            errors.append(f"{where}: the same variant is listed twice")
            continue
        out.append(entry)
    return out


def _variant_labels(datasets: list[str], variants: list[dict[str, Any]],
                    hparams: dict[str, dict[str, Any]], threads: int) -> list[str]:
    """Each variant's label "encoder/pe/fusion" (the encoder as its variant label)."""
    if not datasets:
        return []
    d = datasets[0]
    return [TrialConfig.build(d, space_all=hparams.get("all"), space_dataset=hparams.get(d),
                              **v, num_threads=threads).variant_label() for v in variants]


def _validate_header(raw: Mapping, errors: list[str]) -> Any:
    """Top-level keys, required keys, name, description, experiment -> the name."""
    _unknown_keys(raw, TOP_LEVEL_KEYS, "", errors)
    for k in REQUIRED_KEYS:
        if k not in raw:
            errors.append(f"{k}: missing required key")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()
                             or any(c in name for c in "/\\ ") or name in (".", "..")):
        errors.append(f"name: must be a non-empty string without '/', '\\', spaces or "
                      f"'.'/'..', got {name!r}")
    for k in ("description", "experiment"):
        if k in raw and not isinstance(raw[k], str):
            errors.append(f"{k}: must be a string, got {raw[k]!r}")
    return name


def _validate_pin(res: Mapping, errors: list[str]) -> dict[str, Any]:
    """`resources.accelerator_type` / `resources.node_label`: where trials may run (one
    platform per sweep, so that every pair shares it). -> the valid ones."""
    out: dict[str, Any] = {}
    acc = res.get("accelerator_type")
    if acc is not None:
        if isinstance(acc, str) and _ACCELERATOR.match(acc):
            out["accelerator_type"] = acc
        else:
            errors.append(f"resources.accelerator_type: must be a Ray accelerator type, e.g. "
                          f"'A10G', 'L4', 'T4', 'A100', 'H100' (the names in "
                          f"ray.util.accelerators; `ray status` lists a cluster's as "
                          f"accelerator_type:NAME), got {acc!r}")
    labels = res.get("node_label")
    if labels is not None:
        bad = (not isinstance(labels, Mapping) or not labels
               or not all(isinstance(k, str) and _LABEL_KEY.match(k) and isinstance(v, str)
                          and _LABEL_VALUE.match(v) for k, v in labels.items()))
        if bad:
            errors.append(f"resources.node_label: must be a non-empty mapping of Ray node "
                          f"labels, key -> value strings, e.g. {{fusion-sweep/platform: "
                          f"g5-a10g}} (keys [prefix/]name, values up to 63 of A-Z a-z 0-9 "
                          f"- _ .; cluster.yaml sets them per node type under `labels`), "
                          f"got {labels!r}")
        else:
            out["node_label"] = dict(labels)
    return out


def _validate_resources(raw: Mapping, errors: list[str]) -> tuple[dict[str, Any], Any]:
    """-> (resources per trial, max_failures)."""
    resources: dict[str, Any] = _default("resources")
    res = raw.get("resources", {})
    if not isinstance(res, Mapping):
        errors.append(f"resources: must be a mapping with keys {choices(RESOURCE_KEYS)}, got {res!r}")
    else:
        _unknown_keys(res, RESOURCE_KEYS, "resources.", errors)
        cpu, gpu = res.get("cpu", resources["cpu"]), res.get("gpu", resources["gpu"])
        if not _is_num(cpu) or cpu <= 0:
            errors.append(f"resources.cpu: must be a positive number, got {cpu!r}")
        if not _is_num(gpu) or gpu < 0:
            errors.append(f"resources.gpu: must be a number >= 0 (fractional packs trials "
                          f"onto one GPU), got {gpu!r}")
        elif gpu > 1 and not float(gpu).is_integer():
            errors.append(f"resources.gpu: above 1 it must be a whole number (Ray's rule), got {gpu!r}")
        resources = {"cpu": cpu, "gpu": gpu}
        mem = res.get("memory_gb")
        if mem is not None:
            if not _is_num(mem) or mem <= 0:
                errors.append(f"resources.memory_gb: must be a positive number (GiB per trial; "
                              f"omit it to estimate from the trial's config), got {mem!r}")
            else:
                resources["memory_gb"] = mem
        resources.update(_validate_pin(res, errors))
    max_failures = raw.get("max_failures", _default("max_failures"))
    if not _is_int(max_failures) or max_failures < -1:
        errors.append(f"max_failures: must be an integer >= 0 (-1 = retry forever), got {max_failures!r}")
    return resources, max_failures


def _validate_comparison(raw: Mapping, datasets: list[str], fusions: list[str],
                         labels: list[str] | None,
                         errors: list[str]) -> tuple[Any, Any, Any, dict]:
    """What `stats` compares: -> (baseline, metric, equivalence_margin, directions).

    labels: the variants' labels "encoder/pe/fusion" (None when the grid has errors)."""
    baseline = raw.get("baseline", _default("baseline"))
    if isinstance(baseline, str) and "/" in baseline:
        if labels is not None and baseline not in labels:
            errors.append(f"baseline: variant {baseline!r} is not one of this space's variants"
                          f"{did_you_mean(baseline, labels)}; choose a fusion from "
                          f"{choices(fusions)} or a variant from {choices(labels)}")
    elif baseline not in FUSIONS:
        errors.append(f"baseline: unknown fusion {baseline!r}{did_you_mean(baseline, FUSIONS)}; "
                      f"choose from {choices(sorted(FUSIONS))}")
    elif fusions and baseline not in fusions:
        errors.append(f"baseline: {baseline!r} is not in fusions ({choices(fusions)}); the comparison "
                      f"needs the baseline's trials")
    metric = raw.get("metric", _default("metric"))
    if metric not in METRICS:
        errors.append(f"metric: unknown metric {metric!r}{did_you_mean(metric, METRICS)}; "
                      f"choose from {choices(METRICS)}")
    margin = raw.get("equivalence_margin")
    if isinstance(margin, Mapping):
        for d, m in margin.items():
            if d not in datasets:
                errors.append(f"equivalence_margin.{d}: not a dataset of this space"
                              f"{did_you_mean(d, datasets)}; choose from {choices(datasets)}")
            if not _is_num(m) or m <= 0:
                errors.append(f"equivalence_margin.{d}: must be a positive number, got {m!r}")
    elif margin is not None and (not _is_num(margin) or margin <= 0):
        errors.append(f"equivalence_margin: must be null, a positive number, or "
                      f"{{dataset: number}}, got {margin!r}")
    directions = raw.get("directions") or {}
    if not isinstance(directions, Mapping):
        errors.append(f"directions: must be a mapping {{metric: higher|lower}}, got {directions!r}")
        directions = {}
    for k, v in directions.items():
        if k in TASK_METRICS:  # facts about the task, the same for every arm: never compared
            errors.append(f"directions.{k}: {k!r} is a fact about the dataset (one of "
                          f"{choices(TASK_METRICS)}), not a result that is compared; remove it")
        elif v not in DIRECTIONS:
            errors.append(f"directions.{k}: must be one of {choices(DIRECTIONS)}, got {v!r}")
    return baseline, metric, margin, dict(directions)


def _validate_hyperparameters(raw: Mapping, datasets: list[str],
                              errors: list[str]) -> dict[str, dict[str, Any]]:
    """`hyperparameters: {all|<dataset>: {field: value}}` -> the valid groups."""
    hp_raw = raw.get("hyperparameters") or {}
    allowed_fields = [f for f in TrialConfig.field_names() if f not in RESERVED_FIELDS]
    hparams: dict[str, dict[str, Any]] = {}
    if not isinstance(hp_raw, Mapping):
        errors.append(f"hyperparameters: must be a mapping {{all|<dataset>: {{field: value}}}}, "
                      f"got {hp_raw!r}")
        return hparams
    for group, values in hp_raw.items():
        where = f"hyperparameters.{group}"
        if group != "all" and group not in DATASETS:
            errors.append(f"{where}: unknown dataset {group!r}{did_you_mean(group, DATASETS)}; "
                          f"use 'all' or one of {choices(sorted(DATASETS))}")
            continue
        if group != "all" and datasets and group not in datasets:
            errors.append(f"{where}: dataset {group!r} is not in datasets "
                          f"({choices(datasets)})")
            continue
        values = {} if values is None else values
        if not isinstance(values, Mapping):
            errors.append(f"{where}: must be a mapping {{field: value}}, got {values!r}")
            continue
        clean = {}
        for k, v in values.items():
            if k in RESERVED_FIELDS:
                why = ("set by the grid (datasets/pes/fusions/variants/seeds)"
                       if k in IDENTITY_FIELDS else
                       "set from resources.cpu" if k == "num_threads" else
                       "managed by `fusion-sweep tune`")
                errors.append(f"{where}.{k}: may not be set here ({why})")
            elif k not in allowed_fields:
                errors.append(f"{where}.{k}: unknown hyperparameter{did_you_mean(k, allowed_fields)}; "
                              f"valid: {choices(sorted(allowed_fields))}")
            else:
                clean[k] = v
        hparams[group] = clean
    return hparams


def _validate_grid_points(datasets: list[str], variants: list[dict[str, Any]],
                          hparams: dict[str, dict[str, Any]], threads: int,
                          errors: list[str], where_grid: str) -> dict[str, set[str]]:
    """Every grid point must build a valid TrialConfig. A problem of a dataset's
    hyperparameters is reported once, under its key, not once per grid point.
    -> each dataset's own problems (so later checks do not repeat them)."""
    base_errors: dict[str, set[str]] = {}
    for d in datasets:
        overrides = {**hparams.get("all", {}), **hparams.get(d, {})}
        where = f"hyperparameters.{d}" if d in hparams else (
            "hyperparameters.all" if "all" in hparams else f"datasets ({d} defaults)")
        base_errors[d] = set(_build_errors(d, threads, overrides))
        errors.extend(f"{where}: {m}" for m in sorted(base_errors[d]))
        for v in variants:
            shown = ", ".join(f"{k}={x}" for k, x in v.items())
            errors.extend(f"{where_grid} (dataset={d}, {shown}): {m}"
                          for m in _build_errors(d, threads, {**overrides, **v})
                          if m not in base_errors[d])
    return base_errors


def _validate_tune(t: Any, seeds: list[int], datasets: list[str], pes: list[str], baseline: str,
                   hparams: dict, allowed_fields: list[str], threads: int, errors: list[str],
                   base_errors: dict[str, set[str]]) -> HPSearchSpec | None:
    """The `tune:` section: tuning seeds apart from the sweep's, a budget, a pe of the space,
    and `search` ranges whose every probed value gives a valid trial."""
    if not isinstance(t, Mapping):
        errors.append(f"tune: must be a mapping with keys {choices(TUNE_KEYS)}, got {t!r}")
        return None
    _unknown_keys(t, TUNE_KEYS, "tune.", errors)
    for k in ("seeds", "budget", "search"):
        if k not in t:
            errors.append(f"tune.{k}: missing required key")
    tseeds = _seed_list(t["seeds"], "tune.seeds", errors) if "seeds" in t else []
    overlap = sorted(set(tseeds) & set(seeds))
    if overlap:
        errors.append(f"tune.seeds: {overlap} also appear in seeds {seeds}; tuning seeds must be "
                      f"kept apart from the sweep's seeds")
    budget = t.get("budget")
    if "budget" in t and (not _is_int(budget) or budget < 1):
        errors.append(f"tune.budget: must be a positive integer (trials per dataset), got {budget!r}")
    pe = t.get("pe")
    if pe is not None and pe not in pes:
        errors.append(f"tune.pe: {pe!r} is not in pes{did_you_mean(pe, pes)}; choose from "
                      f"{choices(pes)}")

    search = t.get("search") or {}
    if not isinstance(search, Mapping) or ("search" in t and not search):
        errors.append(f"tune.search: must be a non-empty mapping {{field: {{distribution: args}}}} "
                      f"with distributions {choices(DISTRIBUTIONS)}")
        search = {}
    # the trial the search tunes: the baseline fusion with the tuned pe, on every dataset
    tune_pe = pe or (pes[0] if pes else TrialConfig.__dataclass_fields__["pe"].default)
    bases = {d: {**hparams.get("all", {}), **hparams.get(d, {}), "fusion": baseline, "pe": tune_pe}
             for d in datasets}
    clean: dict[str, dict[str, list]] = {}
    for k, spec in search.items():
        entry = _validate_search_entry(k, spec, allowed_fields, bases, threads, errors)
        if entry is not None:
            clean[k] = entry
    if not _is_int(budget) or budget < 1:
        return None
    return HPSearchSpec(seeds=tuple(tseeds), budget=budget, search=clean, pe=pe)


def _validate_search_entry(k: str, spec: Any, allowed_fields: list[str],
                           bases: Mapping[str, Mapping[str, Any]], threads: int,
                           errors: list[str]) -> dict[str, list] | None:
    """One `tune.search` entry `field: {distribution: args}` -> itself, cleaned; None when
    the field or the distribution is invalid. Every value the distribution can produce
    (its probes) must make a valid trial config on every dataset."""
    where = f"tune.search.{k}"
    if k in RESERVED_FIELDS or k not in allowed_fields:
        errors.append(f"{where}: not a tunable hyperparameter{did_you_mean(k, allowed_fields)}; "
                      f"valid: {choices(sorted(allowed_fields))}")
        return None
    if not isinstance(spec, Mapping) or len(spec) != 1:
        errors.append(f"{where}: must be one {{distribution: args}} with distribution from "
                      f"{choices(DISTRIBUTIONS)}, got {spec!r}")
        return None
    (dist, args), = spec.items()
    if dist not in DISTRIBUTIONS:
        errors.append(f"{where}: unknown distribution {dist!r}{did_you_mean(dist, DISTRIBUTIONS)}; "
                      f"choose from {choices(DISTRIBUTIONS)}")
        return None
    kind = DISTRIBUTIONS[dist]
    if not isinstance(args, list) or not args or not kind.valid(args):
        errors.append(f"{where}.{dist}: expects {kind.expects}, got {args!r}")
        return None
    probes = kind.probes(args)
    for d, base in bases.items():
        known = set(_build_errors(d, threads, base))  # reported elsewhere already
        bad = [f"{where}.{dist}: value {v!r} gives an invalid trial ({d}): {m}"
               for v in probes for m in _build_errors(d, threads, {**base, k: v})
               if m not in known]
        if bad:
            errors.extend(bad)
            break
    return {dist: list(args)}
