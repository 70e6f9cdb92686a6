"""Search-space YAML: shipped spaces, validation (every error at once), round trips."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fusion_sweep.plan.space import (SPACE_DIR, SpaceError, dump_space, load_space, parse_space,
                                resolve_space_path, shipped_spaces)

SHIPPED = ["default", "paper-table1", "paper-table2", "paper-table3", "real", "real-ressformer",
           "ressformer", "smoke"]


def write(tmp_path: Path, data: dict, name: str = "space.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def smoke_dict() -> dict:
    return yaml.safe_load((SPACE_DIR / "smoke.yaml").read_text())


# ------------------------------------------------------------------------ shipped spaces
def test_shipped_spaces_present_and_valid():
    assert set(SHIPPED) <= set(shipped_spaces())
    for name in shipped_spaces():
        space = load_space(name)
        assert len(space.grid()) == len(space) > 0, name
        labels = [space.trial_config(space.datasets[0], v, 0).variant_label()
                  for v in space.variant_list()]
        assert space.baseline in (labels if "/" in space.baseline else space.fusions)


@pytest.mark.parametrize("name", SHIPPED)
def test_each_space_opens_with_its_launch_command(name):
    """The first line is a command that, run as written, launches this very file."""
    import shlex

    from fusion_sweep.cli import build_parser

    first = (SPACE_DIR / f"{name}.yaml").read_text().splitlines()[0]
    assert first.startswith("# fusion-sweep ")
    args = build_parser().parse_args(shlex.split(first[len("# fusion-sweep "):]))
    assert args.command == "launch" and args.func.__name__ == "run_launch"
    assert load_space(args.space).source == load_space(str(SPACE_DIR / f"{name}.yaml")).source


def test_default_space_is_the_documented_grid():
    s = load_space("default")
    assert s.datasets == ("synthetic-short", "synthetic-medium", "synthetic-long")
    assert s.fusions == ("add", "concat", "gate-scalar")
    assert s.pes == ("sinusoidal",)
    # eight seeds: at m = 6 the exact sign test reaches alpha/m only from n = 8
    assert s.seeds == tuple(range(8))
    assert len(s.grid()) == 72
    assert s.tune is not None and not set(s.tune.seeds) & set(s.seeds)
    assert {"lr", "dropout", "batch_size"} <= set(s.tune.search)


def test_paper_spaces_match_the_paper():
    t1, t2, t3 = (load_space(f"paper-table{i}") for i in (1, 2, 3))
    assert t1.datasets == ("agnews", "imdb", "arxiv") and len(t1) == 45
    assert t2.datasets == ("arxiv",) and set(t2.fusions) == {"add", "gate-cnn", "gate-scalar"}
    assert set(t3.pes) == {"sinusoidal", "learned", "rope-features", "randn-table"}
    assert set(t3.fusions) == {"add", "concat", "gate-scalar", "gate-mlp"} and len(t3) == 80
    # reference hyperparameters: the dataset defaults, unchanged
    arxiv = t1.grid()[-1]
    assert (arxiv.max_len, arxiv.d_model, arxiv.layers, arxiv.optimizer) == (4096, 128, 2, "adam")


def test_smoke_is_tiny_and_threads_follow_cpu_budget():
    s = load_space("smoke")
    assert len(s) <= 4
    for c in s.grid():
        assert c.epochs == 1 and c.limit_train <= 64 and c.d_model <= 16
        assert c.num_threads == 1
    d = smoke_dict()
    d["resources"] = {"cpu": 2.5, "gpu": 0.25}
    s2 = parse_space(d)
    assert s2.num_threads == 2 and s2.gpu == 0.25
    assert all(c.num_threads == 2 for c in s2.grid())


def test_hyperparameters_all_then_dataset_override():
    d = smoke_dict()
    d["datasets"] = ["synthetic-short", "synthetic-medium"]
    d["hyperparameters"]["synthetic-medium"] = {"d_model": 32, "heads": 4, "max_len": 384}
    s = parse_space(d)
    by = {c.dataset: c for c in s.grid()}
    assert by["synthetic-short"].d_model == 16 and by["synthetic-medium"].d_model == 32
    assert by["synthetic-medium"].epochs == 1  # from `all`


# ----------------------------------------------------------------------------- resolving
def test_unknown_shipped_name_lists_shipped_spaces():
    with pytest.raises(SpaceError, match=r"no search space named 'nope'.*default.*smoke"):
        resolve_space_path("nope")


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(SpaceError, match="file not found"):
        load_space(str(tmp_path / "missing.yaml"))


def test_a_user_file_by_path(tmp_path):
    p = write(tmp_path, {**smoke_dict(), "name": "mine"})
    assert load_space(str(p)).name == "mine"


# ---------------------------------------------------------------------------- validation
def test_unknown_key_names_file_key_and_valid_keys(tmp_path):
    p = write(tmp_path, {**smoke_dict(), "fusion": ["add"]})
    with pytest.raises(SpaceError, match=r"space\.yaml: fusion: unknown key \(did you mean 'fusions'\?\)"
                                         r"; valid keys: name, .*, fusions, "):
        load_space(p)


def test_unknown_fusion_names_valid_choices(tmp_path):
    d = smoke_dict()
    d["fusions"] = ["add", "gated"]
    p = write(tmp_path, d)
    with pytest.raises(SpaceError, match=r"space\.yaml: fusions\[1\]: unknown fusion 'gated'.*"
                                         r"choose from add, concat, gate-cnn, "):
        load_space(p)


def test_every_error_is_reported_at_once(tmp_path):
    d = smoke_dict()
    d.update(datasets=["synthetic-short", "imbd"], pes=["sinusoidal", "rotary"],
             fusions=["add", "concat", "nope"], seeds=[0, 0, -1], metric="acc", colour="red",
             resources={"cpu": 0, "gpu": 1.5}, baseline="mul")
    d["hyperparameters"] = {"all": {"lr": -1, "dropuot": 0.1, "seed": 3}}
    d["tune"] = {"seeds": [0], "budget": 0,
                 "search": {"dropout": {"uniform": [0.0, 1.5]}, "lr": {"loguniform": [0, 1]}}}
    p = write(tmp_path, d)
    with pytest.raises(SpaceError) as e:
        load_space(p)
    errs = e.value.errors
    expected = [
        "colour: unknown key", "datasets[1]: unknown dataset 'imbd' (did you mean 'imdb'?)",
        "fusions[2]: unknown fusion 'nope'", "seeds[1]: seed 0 is listed twice",
        "seeds[2]: seeds are non-negative integers", "resources.cpu: must be a positive number",
        "resources.gpu: above 1 it must be a whole number", "baseline: 'mul' is not in fusions",
        "metric: unknown metric 'acc'", "hyperparameters.all.dropuot: unknown hyperparameter",
        "hyperparameters.all.seed: may not be set here", "hyperparameters.all: lr must be positive",
        "pe=rotary, fusion=concat): fusion 'concat' needs an input-level positional encoding",
        "tune.seeds: [0] also appear in seeds", "tune.budget: must be a positive integer",
        "tune.search.lr.loguniform: expects [low, high], 0 < low < high",
        "tune.search.dropout.uniform: value 1.5 gives an invalid trial",
    ]
    for frag in expected:
        assert any(frag in err for err in errs), (frag, errs)
    assert all(err.startswith(str(p)) for err in errs)  # every line names the file
    assert len(errs) == len(set(errs))  # de-duplicated
    assert str(e.value).startswith(f"{len(errs)} errors in search space {p}")


def test_attention_level_pe_only_with_add(tmp_path):
    d = smoke_dict()
    d["pes"] = ["alibi"]
    d["fusions"] = ["add", "gate-scalar"]
    with pytest.raises(SpaceError, match=r"pe=alibi, fusion=gate-scalar\): fusion 'gate-scalar' "
                                         r"needs an input-level positional encoding"):
        parse_space(d, source="x.yaml")
    d["fusions"] = ["add"]
    assert len(parse_space(d).grid()) == 2


def test_dataset_hyperparameter_error_reported_once_under_its_key():
    d = smoke_dict()
    d["fusions"] = ["add", "concat"]
    d["hyperparameters"]["all"]["heads"] = 3  # 16 % 3 != 0: every grid point would fail
    with pytest.raises(SpaceError) as e:
        parse_space(d, source="s.yaml")
    assert e.value.errors == ["s.yaml: hyperparameters.all: d_model (16) must be divisible by heads (3)"]


def test_hyperparameters_for_dataset_not_in_space():
    d = smoke_dict()
    d["hyperparameters"]["arxiv"] = {"epochs": 2}
    with pytest.raises(SpaceError, match=r"hyperparameters\.arxiv: dataset 'arxiv' is not in datasets"):
        parse_space(d)


def test_reserved_fields_cannot_be_set():
    d = smoke_dict()
    d["hyperparameters"]["all"].update(num_threads=4, evaluate_test=False)
    with pytest.raises(SpaceError) as e:
        parse_space(d)
    msg = str(e.value)
    assert "num_threads: may not be set here (set from resources.cpu)" in msg
    assert "evaluate_test: may not be set here (managed by `fusion-sweep tune`)" in msg


def test_tune_section_validation():
    d = smoke_dict()
    d["tune"]["search"] = {"lr": {"normal": [0, 1]}, "seed": {"choice": [1, 2]},
                           "batch_size": {"choice": []}, "heads": {"randint": [1.5, 4]}}
    with pytest.raises(SpaceError) as e:
        parse_space(d)
    msg = str(e.value)
    assert "tune.search.lr: unknown distribution 'normal'" in msg
    assert "tune.search.seed: not a tunable hyperparameter" in msg
    assert "tune.search.batch_size.choice: expects" in msg
    assert "tune.search.heads.randint: expects [low, high), integers" in msg


def test_equivalence_margin_forms():
    d = smoke_dict()
    d["equivalence_margin"] = {"synthetic-short": 0.01}
    assert parse_space(d).equivalence_margin_for("synthetic-short") == 0.01
    d["equivalence_margin"] = -1
    with pytest.raises(SpaceError, match="equivalence_margin: must be null, a positive number"):
        parse_space(d)


@pytest.mark.parametrize("metric", ["test_majority_rate", "num_classes", "median_tokens"])
def test_a_direction_for_a_task_fact_is_refused(metric):
    """schema.TASK_METRICS describe the dataset, the same for every arm: never compared."""
    from fusion_sweep.schema import TASK_METRICS

    assert metric in TASK_METRICS
    d = smoke_dict()
    d["directions"] = {metric: "higher", "my_metric": "lower"}
    with pytest.raises(SpaceError, match=rf"directions\.{metric}: '{metric}' is a fact about the "
                                         rf"dataset \(one of median_tokens, num_classes, "
                                         rf"test_majority_rate, test_n\), not a result that is compared"):
        parse_space(d)
    d["directions"] = {"my_metric": "lower"}
    assert parse_space(d).directions == {"my_metric": "lower"}


def test_not_a_mapping(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(SpaceError, match="must hold a mapping"):
        load_space(p)
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpaceError, match="not valid YAML"):
        load_space(p)


# ------------------------------------------------------------------------------- writing
def test_dump_round_trip_opens_with_command(tmp_path):
    s = load_space("default")
    out = dump_space(s, tmp_path / "copy.yaml", header=["a note"])
    lines = out.read_text().splitlines()
    assert lines[0] == f"# fusion-sweep launch {out}"
    assert lines[1] == "# a note"
    s2 = load_space(out)
    assert s2.grid() == s.grid() and s2.tune == s.tune and s2.name == s.name


def test_dry_run_prints_grid_without_starting_ray(tmp_path):
    code = ("import sys; from fusion_sweep.cli import main; rc = main(['launch', 'smoke', "
            "'--dry-run']); assert 'ray' not in sys.modules and 'mlflow' not in sys.modules, "
            "'dry run imported ray/mlflow'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "4 trials = 1 datasets × 1 PEs × 2 fusions × 2 seeds; per trial: cpu=1, gpu=0" in r.stdout
    assert "dry run: nothing started" in r.stdout
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()


def test_trial_memory_is_declared_or_estimated(tmp_path):
    from fusion_sweep.plan.grid import plan
    from fusion_sweep.launch.memory import trial_memory_bytes
    from fusion_sweep.launch.preflight import check_local_resources

    d = yaml.safe_load((SPACE_DIR / "smoke.yaml").read_text())
    s = parse_space(d, "smoke.yaml")
    c = s.grid()[0]
    est = trial_memory_bytes(s, c)
    assert 0.5 * 2**30 < est < 2 * 2**30  # actor base + a tiny model
    bigger = trial_memory_bytes(s, c.replace(batch_size=64, max_len=160))
    assert bigger > est  # grows with the step's activations
    d["resources"] = {"cpu": 1, "gpu": 0, "memory_gb": 3}
    assert trial_memory_bytes(parse_space(d, "smoke.yaml"), c) == 3 * 2**30
    d["resources"]["memory_gb"] = 10_000
    huge = parse_space(d, "smoke.yaml")
    with pytest.raises(ValueError, match=r"resources: one trial needs about 10000\.0 GiB of memory "
                                         r"but the local Ray instance schedules at most"):
        check_local_resources(huge, plan(huge))
    d["resources"]["memory_gb"] = -1
    with pytest.raises(SpaceError, match=r"resources\.memory_gb: must be a positive number"):
        parse_space(d, "smoke.yaml")


def test_the_default_space_states_the_measured_duration():
    """The default space's header states what the main job measured (docs/results.md); a stale
    promise is a drift bug (it once said "about 15 minutes" for a 5-minute job)."""
    header = (SPACE_DIR / "default.yaml").read_text().split("\nname:")[0]
    assert "72 trials" in header and "about 7 minutes on a 2-core CPU" in header
