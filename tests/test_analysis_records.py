"""One comparison record (issue 40, item 3): its fields are the JSON's keys, in order; the
stages that fill it are real frozen dataclasses that together fill every field once."""
from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from fusion_sweep.analysis import schema
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.report import Judged, LearnRates, Measured, WinRateStats
from fusion_sweep.analysis.stats import PairedStats

# The keys every `comparisons` entry carries first (issue 4), in this order.
REQUIRED = (
    "dataset", "pe", "metric", "fusion", "baseline", "n", "mean_delta", "sd_delta",
    "t_ci_low", "t_ci_high", "t_p", "wilcoxon_p", "wilcoxon_method", "signflip_p",
    "boot_ci_low", "boot_ci_high", "dz", "n_positive", "p_holm", "tost_p", "power",
    "seeds_for_80_power", "min_p_t", "min_p_wilcoxon", "verdict",
)


def test_the_json_keys_are_the_records_fields_in_order_less_group() -> None:
    """Less `group` and `estimates` (the added estimands write their own fields after these:
    tests/test_fixed_estimands.py)."""
    keys = Comparison.json_keys()
    assert keys[:len(REQUIRED)] == REQUIRED
    assert "group" not in keys and "estimates" not in keys
    assert len(keys) == len(fields(Comparison)) - 2
    assert keys[-1] == "lost_seeds" and "verdict_flags" in keys


def test_no_key_list_is_kept_beside_the_record() -> None:
    assert not [n for n in dir(schema) if "COMPARISON_KEYS" in n]


PARTS = (PairedStats, WinRateStats, LearnRates, Judged)  # the typed values build() takes


def test_the_stages_typed_parts_fill_fields_of_the_record_and_measured_repeats_none() -> None:
    record = {f.name for f in fields(Comparison)}
    own = [{f.name for f in fields(part)} for part in PARTS]
    assert all(names <= record for names in own)  # a part's field is a record field
    overlap = {n for i, a in enumerate(own) for b in own[i + 1:] for n in a & b}
    assert overlap == {"notes"}  # the statistics' notes, then the verdicts' with them
    # Measured holds the typed parts (and what the verdict rules read), never the fields
    assert not {f.name for f in fields(Measured)} & record - {"higher_is_better",
                                                               "chance_level"}
    with pytest.raises(FrozenInstanceError):
        Judged(*(None,) * len(fields(Judged))).verdict = "x"


def test_build_names_a_field_no_stage_filled_and_a_value_that_is_no_field() -> None:
    judged = Judged(*(None,) * len(fields(Judged)))
    with pytest.raises(AssertionError, match=r"missing \[.*'dataset'.*\], not a field "
                                             r"\['nonsense'\]"):
        Comparison.build(judged, nonsense=1)
