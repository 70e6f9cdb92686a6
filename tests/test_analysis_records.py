"""One comparison record (issue 40, item 3): its fields are the JSON's keys, in order; the
stages that fill it are real frozen dataclasses that together fill every field once."""
from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from fusion_sweep.analysis import schema
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.report import Judged, Measured

# The keys every `comparisons` entry carries first (issue 4), in this order.
REQUIRED = (
    "dataset", "pe", "metric", "fusion", "baseline", "n", "mean_delta", "sd_delta",
    "t_ci_low", "t_ci_high", "t_p", "wilcoxon_p", "wilcoxon_method", "signflip_p",
    "boot_ci_low", "boot_ci_high", "dz", "n_positive", "p_holm", "tost_p", "power",
    "seeds_for_80_power", "min_p_t", "min_p_wilcoxon", "verdict",
)


def test_the_json_keys_are_the_records_fields_in_order_less_group() -> None:
    keys = Comparison.json_keys()
    assert keys[:len(REQUIRED)] == REQUIRED
    assert "group" not in keys and len(keys) == len(fields(Comparison)) - 1
    assert keys[-1] == "lost_seeds" and "verdict_flags" in keys


def test_no_key_list_is_kept_beside_the_record() -> None:
    assert not [n for n in dir(schema) if "COMPARISON_KEYS" in n]


def test_measured_and_judged_fill_every_field_of_the_record() -> None:
    own = {f.name for f in fields(Measured)}
    judged = {f.name for f in fields(Judged)}
    record = {f.name for f in fields(Comparison)}
    assert record <= own | judged
    assert own & judged == {"notes"}  # the statistics' notes, then the verdicts' with them
    assert {"pair", "ratio_test", "collapse", "arm_learning", "ref_learning"} == own - record
    with pytest.raises(FrozenInstanceError):
        Judged(*(None,) * len(fields(Judged))).verdict = "x"
