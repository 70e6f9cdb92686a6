"""Pairing's rules at their edges (fusion_sweep.analysis.pairing, issue 42): how many finished
runs make a duplicate seed, which seeds count as copies of each other, when two platforms
are compared, and which dropped seeds the win rate counts as lost."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import pairing
from fusion_sweep.analysis.pairing import NON_FINITE, Cell, cell_key
from fusion_sweep.analysis.variants import Variant, parse_baseline

ADD, CONCAT = Variant("standard", "sinusoidal", "add"), Variant("standard", "sinusoidal",
                                                                  "concat")


def _runs(statuses: list[str], values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"dataset": "d", "encoder": "standard", "pe": "sinusoidal",
                         "fusion": "add", "seed": 0, "status": statuses, "test_acc": values})


@pytest.mark.parametrize("statuses, values, reason, detail", [
    (["FINISHED"], [0.8], None, ""),
    (["FINISHED", "FAILED"], [0.8, 0.1], None, ""),
    (["FINISHED", "FINISHED"], [0.8, 0.7], "duplicate_seed",
     "2 finished runs for the same seed"),
    (["FINISHED", "FINISHED"], [0.8, float("nan")], "duplicate_seed",
     "2 finished runs for the same seed, 1 with a non-finite test_acc"),
    (["FINISHED", "FINISHED", "FINISHED"], [0.8, 0.7, 0.6], "duplicate_seed",
     "3 finished runs for the same seed")])
def test_two_finished_runs_of_one_seed_are_a_duplicate(statuses, values, reason, detail) -> None:
    """One finished run is the seed's value (a failed retry beside it does not count); two or
    more are a duplicate, a NaN copy counted before the finiteness filter."""
    cell = pairing.make_cell(_runs(statuses, values), "test_acc")
    assert (cell.reason, cell.detail) == (reason, detail)
    assert (cell.value == 0.8) is (reason is None)


def _cells(fps: dict[tuple[Variant, int], str]) -> dict:
    """Every seed shares its dataset's split (fp_split depends on the data seed only)."""
    return {cell_key("d", v, s): Cell(value=0.5, fps=(("fp_split", "sss"),
                                                      ("fp_batch_order", fp)))
            for (v, s), fp in fps.items()}


def test_a_copied_seed_is_another_seed_of_the_same_arm() -> None:
    """copied_seeds: two seeds of ONE arm with the same seed-dependent fingerprint are copies
    (both dropped); the same value on another arm's other seed is no copy (different arms
    share a seed's batch order by design, and may share nothing else); a shared split is
    no sign of a copy."""
    cells = _cells({(ADD, 0): "aaa", (ADD, 1): "aaa", (ADD, 2): "ccc",
                    (CONCAT, 0): "ddd", (CONCAT, 1): "ccc"})
    out = pairing.copied_seeds(cells)
    assert {k[3:] for k, c in out.items() if not c.ok} == {("add", 0), ("add", 1)}
    assert out[cell_key("d", ADD, 0)].detail == (
        "seeds 0, 1 share the batch_order fingerprint aaa (copied runs)")


@pytest.mark.parametrize("pa, pb, dropped", [
    ("p1", "p2", True), ("p1", "p1", False), ("p1", None, False), (None, "p2", False),
    (None, None, False)])
def test_two_platforms_are_compared_only_when_both_are_known(pa, pb, dropped: bool) -> None:
    a, b = Cell(value=0.5, platform=pa), Cell(value=0.4, platform=pb)
    reason, _ = pairing.pair_problem(a, b, "concat", "add")
    assert (reason == "platform_mismatch") is dropped and (reason is None) is (not dropped)


@pytest.mark.parametrize("arm, ref, lost", [
    (NON_FINITE, None, True), (None, NON_FINITE, True), (NON_FINITE, NON_FINITE, True),
    (NON_FINITE, "failed_trial", False), ("failed_trial", NON_FINITE, False),
    ("missing_trial", None, False)])
def test_a_seed_is_lost_only_to_a_non_finite_metric_beside_a_usable_or_non_finite_one(
        arm, ref, lost: bool) -> None:
    """pair_one's `lost` (the win rate counts them against the arm): a diverged run beside a
    usable or diverged one; a seed that also failed or is missing on the other side is a
    failed pair, not a lost one."""
    def cell(reason):
        return Cell(value=0.5) if reason is None else Cell(reason=reason, detail="x")

    cells = {cell_key("d", CONCAT, 3): cell(arm), cell_key("d", ADD, 3): cell(ref)}
    paired, dropped = pairing.pair_one(cells, "d", "test_acc", CONCAT, ADD, [3],
                                       parse_baseline("add"))
    assert paired.lost == ((3,) if lost else ()) and len(dropped) == 1
    assert paired.seeds.size == 0 and np.isnan(paired.x).all()
