"""Pairing (`fusion_sweep.analysis.pairing`) one function at a time, every field and every
word of what it records: cells, code and platform checks, copied and superseded runs, the
pairs of a group and the warnings. Unit-level (well under a second) so that a mutant of
pairing.py meets a failing test before the end-to-end reports (issue 42)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import pairing
from fusion_sweep.analysis.pairing import MISSING, NON_FINITE, Cell, cell_key
from fusion_sweep.analysis.sections import DroppedPair
from fusion_sweep.analysis.variants import Variant, parse_baseline
from fusion_sweep.schema import code_fingerprint

ADD = Variant("standard", "sinusoidal", "add")
CONCAT = Variant("standard", "sinusoidal", "concat")
GATE = Variant("standard", "sinusoidal", "gate")
R_CONCAT = Variant("ressformer", "sinusoidal", "concat")
nan = float("nan")
FPS = ("fp_split", "fp_batch_order", "fp_shared_init", "fp_dropout", "fp_encoder_init")


def row(fusion="add", seed=0, value=0.5, status="FINISHED", dataset="d", pe="sinusoidal",
        encoder="standard", **extra):
    base = {"dataset": dataset, "encoder": encoder, "pe": pe, "fusion": fusion, "seed": seed,
            "status": status, "test_acc": value, "code_fingerprint": "c" * 16,
            "run_id": f"{fusion}{seed}"}
    base.update({c: f"{c[3:]}-{seed}" for c in FPS})  # a seed's streams, shared by arms
    base["fp_encoder_init"] = f"encoder_init-{encoder}-{seed}"
    base["fp_split"] = "split"
    return {**base, **extra}


def table(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


# --- cells ----------------------------------------------------------------------------

def test_a_slot_without_rows_is_missing():
    assert pairing.make_cell(table(row()).iloc[:0], "test_acc") == MISSING
    assert (MISSING.reason, MISSING.detail, MISSING.ok) == ("missing_trial", "no trial", False)


def test_a_usable_cell_carries_value_fingerprints_code_and_platform():
    r = row(value=0.75, fp_platform="plat1", platform="CPU x, torch 2")
    cell = pairing.make_cell(table(r, row(status="FAILED", value=0.1)), "test_acc")
    assert cell.ok and cell.value == 0.75 and isinstance(cell.value, float)
    assert cell.fps == tuple((c, r[c]) for c in FPS)
    assert (cell.code, cell.platform, cell.platform_label) == ("c" * 16, "plat1", "CPU x, torch 2")
    assert (cell.reason, cell.detail) == (None, "")


def test_a_cell_without_optional_columns_has_none_for_each():
    df = table(row()).drop(columns=[*FPS, "code_fingerprint"])
    cell = pairing.make_cell(df, "test_acc")
    assert cell.fps == tuple((c, None) for c in FPS)
    assert (cell.code, cell.platform, cell.platform_label) == (None, None, "")


@pytest.mark.parametrize("code, plat, label, want", [
    (nan, "", nan, (None, None, "")), (None, None, None, (None, None, "")),
    ("abc", "p", "L", ("abc", "p", "L"))])
def test_blank_code_and_platform_cells_read_as_unknown(code, plat, label, want):
    df = table(row(code_fingerprint=code, fp_platform=plat, platform=label))
    cell = pairing.make_cell(df, "test_acc")
    assert (cell.code, cell.platform, cell.platform_label) == want


@pytest.mark.parametrize("statuses, reason, detail", [
    (["(BLANK)"], "blank_status", "status column blank: not known to have finished"),
    (["(BLANK)", "(BLANK)"], "blank_status", "status column blank: not known to have finished"),
    (["FAILED"], "failed_trial", "status FAILED"),
    (["RUNNING", "FAILED", "FAILED"], "failed_trial", "status FAILED/RUNNING"),
    (["(BLANK)", "KILLED"], "failed_trial", "status (BLANK)/KILLED")])
def test_a_slot_without_a_finished_run(statuses, reason, detail):
    cell = pairing.make_cell(table(*[row(status=s) for s in statuses]), "test_acc")
    assert (cell.reason, cell.detail, cell.ok) == (reason, detail, False)
    assert np.isnan(cell.value)


@pytest.mark.parametrize("value, detail", [(nan, "test_acc = nan"), (float("inf"), "test_acc = inf"),
                                           (-float("inf"), "test_acc = -inf")])
def test_a_non_finite_metric_is_a_lost_seed(value, detail):
    cell = pairing.make_cell(table(row(value=value)), "test_acc")
    assert (cell.reason, cell.detail) == (NON_FINITE, detail) and NON_FINITE == "non_finite_metric"


def test_duplicates_count_their_non_finite_copies():
    cell = pairing.make_cell(table(row(value=nan), row(value=float("inf")), row()), "test_acc")
    assert (cell.reason, cell.detail) == (
        "duplicate_seed", "3 finished runs for the same seed, 2 with a non-finite test_acc")


def test_the_code_column_prefers_a_parsable_component_map():
    comp = json.dumps({"trainer": "t1"})
    plain = np.array(["p0", "p1", None], dtype=object)
    comps = np.array([comp, "not json", None], dtype=object)
    assert pairing._code_column(plain, comps).tolist() == [comp, "p1", None]
    assert pairing._code_column(None, comps).tolist() == [comp, None, None]
    assert pairing._code_column(plain, None) is plain
    assert pairing._code_column(None, None) is None
    df = table(row(code_components=comp), row(seed=1, code_components=nan))
    cells = pairing.cells_for(df, "test_acc")
    assert cells[("d", "standard", "sinusoidal", "add", 0)].code == comp
    assert cells[("d", "standard", "sinusoidal", "add", 1)].code == "c" * 16


def test_cells_for_maps_every_slot_with_a_row():
    df = table(row(seed=1, value=0.6), row(seed=0, value=0.7), row("concat", 0, 0.8),
               row("concat", 0, 0.9))
    cells = pairing.cells_for(df, "test_acc")
    assert list(cells) == [("d", "standard", "sinusoidal", "add", 0),
                           ("d", "standard", "sinusoidal", "add", 1),
                           ("d", "standard", "sinusoidal", "concat", 0)]
    assert [c.value for c in list(cells.values())[:2]] == [0.7, 0.6]
    assert cells[("d", "standard", "sinusoidal", "concat", 0)].reason == "duplicate_seed"


def test_usable_values_lists_only_usable_cells():
    df = table(row(seed=0, value=0.7), row(seed=1, value=nan), row("concat", 0, 0.8))
    got = pairing.usable_values(df, "test_acc")
    assert list(got.columns) == ["dataset", "encoder", "pe", "fusion", "seed", "value"]
    assert got.values.tolist() == [["d", "standard", "sinusoidal", "add", 0, 0.7],
                                   ["d", "standard", "sinusoidal", "concat", 0, 0.8]]


# --- copies ---------------------------------------------------------------------------

def test_copies_are_marked_with_every_seed_that_shares_the_fingerprint():
    fp = lambda b, d="x": (("fp_split", "s"), ("fp_batch_order", b), ("fp_dropout", d))  # noqa: E731
    cells = {cell_key("d", ADD, 3): Cell(0.1, fp("0123456789abcdef")),
             cell_key("d", ADD, 1): Cell(0.2, fp("0123456789abcdef", "y")),
             cell_key("d", ADD, 2): Cell(0.3, fp("other", "")),
             cell_key("d", ADD, 4): Cell(reason="failed_trial", detail="status FAILED",
                                         fps=fp("0123456789abcdef")),
             cell_key("d", ADD, 5): Cell(0.4, fp(None, "z"))}
    out = pairing.copied_seeds(cells)
    assert out[cell_key("d", ADD, 3)].detail == (
        "seeds 1, 3 share the batch_order fingerprint 0123456789 (copied runs)")
    assert out[cell_key("d", ADD, 1)].reason == "duplicate_fingerprint"
    assert out[cell_key("d", ADD, 1)].value == 0.2  # kept for the sensitivity check
    assert out[cell_key("d", ADD, 2)].ok and out[cell_key("d", ADD, 5)].ok
    assert out[cell_key("d", ADD, 4)].reason == "failed_trial"
    assert cells[cell_key("d", ADD, 3)].ok  # the input is not changed


def test_a_cell_copied_twice_keeps_its_first_mark():
    fp = (("fp_batch_order", "bbb"), ("fp_dropout", "ddd"))
    cells = {cell_key("d", ADD, 0): Cell(0.1, fp), cell_key("d", ADD, 1): Cell(0.2, fp)}
    out = pairing.copied_seeds(cells)
    assert out[cell_key("d", ADD, 0)].detail == (
        "seeds 0, 1 share the batch_order fingerprint bbb (copied runs)")


# --- code -----------------------------------------------------------------------------

def test_code_difference_of_component_maps_names_the_shared_components_that_differ():
    a = json.dumps({"trainer": "t1", "fusion:add": "f1", "data_dir:imdb": "x", "pe": "p"})
    b = json.dumps({"trainer": "t2", "fusion:concat": "f2", "data_dir:imdb": "y", "pe": "p"})
    assert pairing.code_difference(a, b, "concat", "add") == (
        "concat and add ran different code of the local copy (data_dir) of imdb, the trainer")
    assert pairing.code_difference(json.dumps({"trainer": "t", "fusion:add": "1"}),
                                   json.dumps({"trainer": "t", "fusion:gate": "2"}), "a", "b") == ""


@pytest.mark.parametrize("a, b", [(None, "x"), ("x", None), (None, None), ("same", "same")])
def test_code_difference_without_both_codes_or_with_equal_ones_is_empty(a, b):
    assert pairing.code_difference(a, b, "a", "b") == ""


def test_plain_fingerprints_that_differ_are_shown_by_ten_characters():
    assert pairing.code_difference("0123456789abcdef", "fedcba9876543210", "concat", "add") == (
        "concat ran code 0123456789, add ran fedcba9876")
    comp = {"trainer": "t"}
    assert pairing.code_difference(json.dumps(comp), "fedcba9876543210", "concat", "add") == (
        f"concat ran code {code_fingerprint(comp)[:10]}, add ran fedcba9876")
    assert pairing.code_difference("fedcba9876543210", json.dumps(comp), "concat", "add") == (
        f"concat ran code fedcba9876, add ran {code_fingerprint(comp)[:10]}")


# --- fingerprints and platforms -------------------------------------------------------

def fps(**v):
    return tuple((c, v.get(c[3:])) for c in FPS)


def test_fingerprint_mismatch_lists_every_fingerprint_both_have_and_differ_on():
    a = Cell(0.1, fps(split="s", batch_order="0123456789abc", dropout="d1", encoder_init="e1"))
    b = Cell(0.2, fps(split="s", batch_order="abcdefghijklm", dropout="d2", encoder_init="e2"))
    assert pairing.fingerprint_mismatch(a, b) == (
        "batch_order (0123456789 vs abcdefghij); dropout (d1 vs d2); encoder_init (e1 vs e2)")
    assert pairing.fingerprint_mismatch(a, b, same_encoder=False) == (
        "batch_order (0123456789 vs abcdefghij); dropout (d1 vs d2)")


@pytest.mark.parametrize("va, vb", [("x", None), (None, "x"), ("x", nan), ("", "x"), ("x", ""),
                                    ("x", "x")])
def test_a_fingerprint_missing_on_either_side_is_not_compared(va, vb):
    assert pairing.fingerprint_mismatch(Cell(0.1, fps(dropout=va)), Cell(0.1, fps(dropout=vb))) == ""


def test_pair_problem_checks_sides_then_code_then_platform_then_fingerprints():
    ok = Cell(0.5, fps(dropout="d1"), code="c1", platform="p1", platform_label="CPU a")
    bad = Cell(reason="failed_trial", detail="status FAILED")
    assert pairing.pair_problem(bad, bad, "concat", "add") == ("failed_trial",
                                                              "concat: status FAILED")
    assert pairing.pair_problem(ok, bad, "concat", "add") == ("failed_trial", "add: status FAILED")
    other_code = Cell(0.4, fps(dropout="d2"), code="c2", platform="p2", platform_label="CPU b")
    assert pairing.pair_problem(ok, other_code, "concat", "add") == (
        "code_mismatch", "concat ran code c1, add ran c2")
    other_plat = Cell(0.4, fps(dropout="d2"), code="c1", platform="p2", platform_label="CPU b")
    assert pairing.pair_problem(ok, other_plat, "concat", "add") == (
        "platform_mismatch", "concat ran on CPU a, add on CPU b (platforms p1 vs p2)")
    other_fp = Cell(0.4, fps(dropout="d2", encoder_init="e"), code="c1", platform="p1")
    assert pairing.pair_problem(ok, other_fp, "concat", "add") == (
        "fingerprint_mismatch", "dropout (d1 vs d2)")
    enc = Cell(0.4, fps(dropout="d1", encoder_init="e2"), code="c1", platform="p1")
    enc1 = Cell(0.4, fps(dropout="d1", encoder_init="e1"), code="c1", platform="p1")
    assert pairing.pair_problem(enc1, enc, "a", "b") == ("fingerprint_mismatch",
                                                        "encoder_init (e1 vs e2)")
    assert pairing.pair_problem(enc1, enc, "a", "b", same_encoder=False) == (None, "")
    assert pairing.pair_problem(ok, ok, "a", "b") == (None, "")


@pytest.mark.parametrize("la, lb, want", [
    ("CPU x, torch 2.1, 4 threads", "CPU x, torch 2.2, 4 threads",
     "concat ran on torch 2.1, add on torch 2.2 (platforms 0123456789 vs fedcba9876)"),
    ("GPU H100 (CUDA 12.1, cuDNN 9), torch 2", "GPU H100 (CUDA 12.4, cuDNN 9), torch 2",
     "concat ran on GPU H100 (CUDA 12.1, cuDNN 9), add on GPU H100 (CUDA 12.4, cuDNN 9) "
     "(platforms 0123456789 vs fedcba9876)"),
    ("CPU x, torch 2", "CPU x", "concat ran on torch 2, add on  (platforms 0123456789 vs "
                               "fedcba9876)"),
    ("CPU x", "", "concat ran on platform 0123456789, add on fedcba9876"),
    ("", "CPU x", "concat ran on platform 0123456789, add on fedcba9876"),
    ("CPU x", "CPU x", "concat ran on platform 0123456789, add on fedcba9876")])
def test_platform_difference_names_the_parts_that_differ(la, lb, want):
    a = Cell(0.1, platform="0123456789abcdef", platform_label=la)
    b = Cell(0.1, platform="fedcba9876543210", platform_label=lb)
    assert pairing.platform_difference(a, b, "concat", "add") == want


def test_short_and_run_names():
    assert pairing._short("0123456789abcdef") == "0123456789" and pairing._short(None) == "unknown"
    assert pairing._short(nan) == "unknown" and pairing._short("abc") == "abc"
    assert pairing._run_name(7, pd.Series({"run_id": "r1"})) == "run r1"
    assert pairing._run_name(7, pd.Series({"run_id": ""})) == "row 7"
    assert pairing._run_name(7, pd.Series({"run_id": nan})) == "row 7"
    assert pairing._run_name(7, pd.Series({"x": 1})) == "row 7"
    assert pairing._is_set("x") and not pairing._is_set("") and not pairing._is_set(nan)


def test_a_dropped_record_names_both_variants():
    rec = pairing.dropped_record("d", "test_acc", R_CONCAT, ADD, "standard/sinusoidal/add", 3.0,
                                 "failed_trial", "why")
    assert rec == DroppedPair("d", "ressformer", "sinusoidal", "test_acc", "concat",
                              "standard/sinusoidal/add", "ressformer/sinusoidal/concat",
                              "standard/sinusoidal/add", 3, "failed_trial", "why")
    assert isinstance(rec.seed, int)
    run = pairing.dropped_record("d", None, ADD, None, None, 1, "superseded_code", "")
    assert run.baseline_variant is None


# --- superseded runs ------------------------------------------------------------------

def test_nothing_is_superseded_without_a_mark_or_a_current_code():
    df = table(row(), row(code_fingerprint="old"))
    for current in (None, ""):
        out, records = pairing.supersede(df, current)
        assert out is df and records == []
    out, records = pairing.supersede(df.drop(columns=["code_fingerprint"]), "new")
    assert records == [] and len(out) == 2


def test_runs_of_old_code_give_way_to_the_current_code():
    df = table(row(seed=2, code_fingerprint="0123456789old"),
               row(seed=2, code_fingerprint="fedcba9876new", run_id="keep"),
               row(seed=3, code_fingerprint="0123456789old"),
               row(seed=4, code_fingerprint="fedcba9876new"),
               row(seed=4, code_fingerprint="fedcba9876new", status="FAILED"),
               row(seed=5, code_fingerprint="a"), row(seed=5, code_fingerprint="b"))
    out, records = pairing.supersede(df, "fedcba9876new")
    assert list(out.index) == [1, 2, 3, 4, 5, 6]
    assert records == [DroppedPair("d", "standard", "sinusoidal", None, "add", None,
                                   "standard/sinusoidal/add", None, 2, "superseded_code",
                                   "run add2 ran code 0123456789; kept run keep with the "
                                   "sweep's current code fedcba9876")]


def test_a_relaunch_mark_decides_what_is_superseded():
    df = table(row(seed=1, code_fingerprint="0123456789old", superseded_by="r9", run_id=""),
               row(seed=1, code_fingerprint="new", superseded_by=nan, run_id="a"),
               row(seed=1, code_fingerprint="new2", superseded_by="", run_id="b"),
               row(seed=2, superseded_by="x"), row(seed=2, superseded_by="y"))
    out, records = pairing.supersede(df, None)
    assert list(out.index) == [1, 2, 3, 4]
    assert [r.detail for r in records] == [
        "row 0 ran code 0123456789; kept run a, run b with the sweep's current code"]
    assert pairing.supersede(df.assign(superseded_by=""), None)[1] == []


# --- the pairs of a group -------------------------------------------------------------

def test_pair_one_keeps_good_seeds_in_order_and_records_the_rest():
    good = lambda v, d="x": Cell(v, fps(dropout=d))  # noqa: E731
    cells = {cell_key("d", CONCAT, 0): good(0.8), cell_key("d", ADD, 0): good(0.7),
             cell_key("d", CONCAT, 1): good(0.9, "a"), cell_key("d", ADD, 1): good(0.6, "b"),
             cell_key("d", CONCAT, 2): Cell(0.5, reason="duplicate_fingerprint", detail="copy"),
             cell_key("d", ADD, 2): good(0.4),
             cell_key("d", CONCAT, 4): good(0.85), cell_key("d", ADD, 4): good(0.75),
             cell_key("d", ADD, 5): good(0.3)}
    paired, dropped = pairing.pair_one(cells, "d", "test_acc", CONCAT, ADD, [0, 1, 2, 4, 5],
                                       parse_baseline("add"), ("standard", "sinusoidal"))
    assert paired.seeds.tolist() == [0, 4] and paired.seeds.dtype.kind == "i"
    assert paired.x.tolist() == [0.8, 0.85] and paired.y.tolist() == [0.7, 0.75]
    assert (paired.dataset, paired.metric, paired.arm, paired.ref, paired.baseline,
            paired.group) == ("d", "test_acc", CONCAT, ADD, "add", ("standard", "sinusoidal"))
    assert (paired.pe, paired.fusion) == ("sinusoidal", "concat")
    assert paired.unchecked == ((1, 0.9, 0.6),) and paired.lost == ()
    assert [(r.seed, r.reason, r.detail, r.baseline, r.metric) for r in dropped] == [
        (1, "fingerprint_mismatch", "dropout (a vs b)", "add", "test_acc"),
        (2, "duplicate_fingerprint", "concat: copy", "add", "test_acc"),
        (5, "missing_trial", "concat: no trial", "add", "test_acc")]


def test_pair_one_with_nothing_kept_has_empty_arrays():
    paired, dropped = pairing.pair_one({}, "d", "m", CONCAT, ADD, [], parse_baseline("add"))
    assert paired.seeds.shape == paired.x.shape == paired.y.shape == (0,)
    assert paired.group == () and dropped == []


def test_pair_trials_pairs_every_arm_with_the_reference_per_metric_and_group():
    rows = [row(f, s, 0.5 + 0.1 * i + 0.01 * s, pe=pe, other=0.1 * s + i)
            for i, f in enumerate(("add", "concat", "gate")) for s in (0, 1)
            for pe in ("sinusoidal", "rope")]
    df = table(*rows)
    out = pairing.pair_trials(df, ["test_acc", "other"], "add", "baseline")
    got = [(p.metric, p.group, p.arm.fusion, p.ref.fusion, p.seeds.tolist()) for p in out.pairs]
    assert got == [(m, ("standard", pe), f, "add", [0, 1]) for m in ("test_acc", "other")
                   for pe in ("rope", "sinusoidal") for f in ("concat", "gate")]
    assert out.pairs[0].x.tolist() == pytest.approx([0.6, 0.61])
    assert out.dropped == [] and out.warnings == []
    every = pairing.pair_trials(df, ["test_acc"], parse_baseline("add"), "all")
    assert [(p.arm.fusion, p.ref.fusion) for p in every.pairs][:3] == [
        ("concat", "add"), ("gate", "add"), ("gate", "concat")]


def test_pair_trials_only_pairs_seeds_either_arm_has():
    df = table(row("add", 0), row("add", 1), row("concat", 1), row("gate", 2))
    out = pairing.pair_trials(df, ["test_acc"], "add", "baseline")
    concat, gate = out.pairs
    assert concat.seeds.tolist() == [1]
    assert [(r.fusion, r.seed, r.reason) for r in out.dropped] == [
        ("concat", 0, "missing_trial"), ("gate", 0, "missing_trial"),
        ("gate", 1, "missing_trial"), ("gate", 2, "missing_trial")]
    assert out.warnings == [{"code": "unequal_seed_sets", "message":
                             "unequal seed sets across fusions for d/sinusoidal/test_acc "
                             "(usable seeds - add: [0, 1]; concat: [1]; gate: [2])"}]


def test_a_variant_baseline_groups_by_dataset_and_says_variants():
    df = table(row("add", 0), row("concat", 0, encoder="ressformer"), row("add", 1))
    out = pairing.pair_trials(df, ["test_acc"], "standard/sinusoidal/add", "baseline")
    assert [(p.arm.label, p.baseline, p.group) for p in out.pairs] == [
        ("ressformer/sinusoidal/concat", "standard/sinusoidal/add", ())]
    assert out.warnings[0]["message"] == (
        "unequal seed sets across variants for d/test_acc (usable seeds - "
        "ressformer/sinusoidal/concat: [0]; standard/sinusoidal/add: [0, 1])")


def test_variant_series_reads_each_row():
    df = table(row("add"), row("concat", encoder="ressformer", pe="rope"))
    got = pairing.variant_series(df.set_axis([5, 9]))
    assert got.index.tolist() == [5, 9]
    assert got.tolist() == [ADD, Variant("ressformer", "rope", "concat")]


# --- warnings -------------------------------------------------------------------------

def test_no_fingerprints_at_all_is_said_once():
    df = table(row("add"), row("concat")).assign(**{c: None for c in FPS})
    out = pairing.pair_trials(df, ["test_acc"], "add", "baseline")
    assert out.warnings == [{"code": "no_fingerprints", "message":
                             "no fingerprint columns (fp_split, fp_batch_order, fp_shared_init, "
                             "fp_dropout): pairing by seed is unverified"}]


def test_partial_fingerprints_are_counted_per_fingerprint():
    df = table(row("add"), row("concat"), row("gate"))
    df.loc[0, "fp_dropout"] = None
    df.loc[[0, 1], "fp_encoder_init"] = None
    out = pairing.PairingResult()
    pairing._fingerprint_warning(df, out)
    assert out.warnings == [{"code": "partial_fingerprints", "message":
                             "some runs lack fingerprints (dropout missing on 1 of 3 runs, "
                             "encoder_init missing on 2 of 3 runs): those are checked only "
                             "where both trials of a pair have them"}]
    none = pairing.PairingResult()
    pairing._fingerprint_warning(df.assign(fp_encoder_init=None, fp_dropout="x"), none)
    assert none.warnings == []
    only_one = df.assign(fp_batch_order=None, fp_shared_init=None, fp_dropout=None,
                         fp_encoder_init=None, fp_split="s")
    pairing._fingerprint_warning(only_one, none)
    assert none.warnings == []


def test_blank_code_fingerprints_are_named_five_at_a_time():
    rows = [row("add", s, code_fingerprint=None) for s in range(7)]
    df = table(row("concat", 0), *rows, row("gate", 0, status="FAILED", code_fingerprint=None))
    out = pairing.PairingResult()
    pairing._blank_code_warning(df, out)
    names = "; ".join(f"d/standard/sinusoidal/add/seed {s}" for s in range(5))
    assert out.warnings == [{"code": "blank_code_fingerprint", "message":
                             f"7 finished run(s) have a blank code fingerprint ({names} and 2 "
                             "more): their pairs are not checked for code agreement; re-run "
                             "them, or fill the code_fingerprint column"}]
    five = pairing.PairingResult()
    pairing._blank_code_warning(table(row("concat", 0), *rows[:5]), five)
    assert five.warnings[0]["message"].startswith(f"5 finished run(s) have a blank code "
                                                  f"fingerprint ({names}): their")


@pytest.mark.parametrize("codes, statuses", [((None, None), ("FINISHED", "FINISHED")),
                                             (("c", "c"), ("FINISHED", "FINISHED")),
                                             (("c", None), ("FINISHED", "FAILED")),
                                             ((None, "c"), ("FINISHED", "FAILED"))])
def test_no_blank_code_warning_without_a_finished_blank_beside_a_finished_code(codes, statuses):
    df = table(*[row("add", i, status=s, code_fingerprint=c)
                 for i, (c, s) in enumerate(zip(codes, statuses))])
    out = pairing.PairingResult()
    pairing._blank_code_warning(df, out)
    assert out.warnings == []


# --- mutmut's survivors of the above -----------------------------------------------------

def test_superseded_records_come_in_key_order_whatever_the_row_order():
    df = table(row(seed=1),  # a lone run first: nothing to set aside, and the loop goes on
               row(seed=5, code_fingerprint="old5"), row(seed=5, code_fingerprint="new"),
               row(seed=2, code_fingerprint="old2"), row(seed=2, code_fingerprint="new"))
    df = df.drop(columns=["run_id"])
    out, records = pairing.supersede(df, "new")
    assert [r.seed for r in records] == [2, 5]
    assert records[0].detail == ("row 3 ran code old2; kept row 4 with the sweep's current "
                                 "code new")
    assert list(out.index) == [0, 2, 4]


def test_encoder_fingerprints_are_skipped_across_encoders_wherever_they_sit():
    a = Cell(0.1, (("fp_encoder_init", "e1"), ("fp_dropout", "d1")))
    b = Cell(0.1, (("fp_encoder_init", "e2"), ("fp_dropout", "d2")))
    assert pairing.fingerprint_mismatch(a, b, same_encoder=False) == "dropout (d1 vs d2)"


def test_several_differing_platform_parts_are_listed_with_commas():
    a = Cell(0.1, platform="p1", platform_label="CPU x, torch 2.1, 4 threads")
    b = Cell(0.1, platform="p2", platform_label="CPU y, torch 2.2, 4 threads")
    assert pairing.platform_difference(a, b, "concat", "add") == (
        "concat ran on CPU x, torch 2.1, add on CPU y, torch 2.2 (platforms p1 vs p2)")


def test_pair_one_names_the_reference_side_and_checks_encoders_only_within_one():
    enc = lambda e, v: Cell(v, (("fp_dropout", "d"), ("fp_encoder_init", e)))  # noqa: E731
    ress = Variant("ressformer", "sinusoidal", "add")
    cells = {cell_key("long-name", CONCAT, 0): enc("e1", 0.8),
             cell_key("long-name", ADD, 0): enc("e2", 0.7),
             cell_key("long-name", ress, 0): enc("e3", 0.6),
             cell_key("long-name", CONCAT, 1): enc("e1", 0.8)}
    axis = parse_baseline("standard/sinusoidal/add")
    same, dropped = pairing.pair_one(cells, "long-name", "m", CONCAT, ADD, [0, 1], axis)
    assert same.seeds.size == 0 and [(r.seed, r.reason, r.detail) for r in dropped] == [
        (0, "fingerprint_mismatch", "encoder_init (e1 vs e2)"),
        (1, "missing_trial", "standard/sinusoidal/add: no trial")]
    assert (dropped[0].dataset, dropped[0].baseline_variant, dropped[0].variant) == (
        "long-name", "standard/sinusoidal/add", "standard/sinusoidal/concat")
    across, none = pairing.pair_one(cells, "long-name", "m", CONCAT, ress, [0], axis)
    assert across.seeds.tolist() == [0] and none == []


def test_cells_for_names_the_metric_of_a_lost_or_duplicated_seed():
    df = table(row(seed=0, value=nan), row(seed=1, value=float("inf")), row(seed=1))
    cells = pairing.cells_for(df, "test_acc")
    assert [c.detail for c in cells.values()] == [
        "test_acc = nan", "2 finished runs for the same seed, 1 with a non-finite test_acc"]


def test_copies_are_found_after_an_unusable_cell_and_after_a_fingerprint_no_one_shares():
    fp = lambda b: (("fp_batch_order", b),)  # noqa: E731
    cells = {cell_key("d", ADD, 0): Cell(reason="failed_trial", detail="x", fps=fp("z")),
             cell_key("d", ADD, 1): Cell(0.1, fp("alone")),
             cell_key("d", ADD, 2): Cell(0.2, fp("copy")),
             cell_key("d", ADD, 3): Cell(0.3, fp("copy"))}
    out = pairing.copied_seeds(cells)
    assert [c.reason for c in out.values()] == [
        "failed_trial", None, "duplicate_fingerprint", "duplicate_fingerprint"]


def test_six_blank_code_fingerprints_name_five_and_one_more():
    rows = [row("add", s, code_fingerprint=None) for s in range(6)]
    out = pairing.PairingResult()
    pairing._blank_code_warning(table(row("concat", 0), *rows), out)
    assert "seed 4 and 1 more): their pairs" in out.warnings[0]["message"]
