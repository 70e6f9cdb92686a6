"""Issue 40 item 3: the report's sections are frozen records, validated when built, each
written to JSON by its own `to_json`; the report holds the claim and sequential records
themselves (nothing rebuilds them from their JSON), and the document is built once."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from fusion_sweep.analysis.claims import ClaimSetResult
from fusion_sweep.analysis.report import _json_clean
from fusion_sweep.analysis.schema import SEQUENTIAL_KEYS, WARNING_KEYS, AnalysisError
from fusion_sweep.analysis.sections import (
    ChanceSection, DesignWarning, DroppedPair, Family, Interaction, Source,
)
from fusion_sweep.analysis.sequential import SequentialResult, SequentialSection

sys.path.insert(0, str(Path(__file__).parent))
import report_cases  # noqa: E402


def test_every_section_is_a_frozen_record_and_its_json_is_the_reports() -> None:
    rep = report_cases.report_of("overclaim_adaptive_file")  # adaptive: a sequential section
    js = rep.to_dict()
    sections = {"source": rep.source, "family": rep.family, "interaction": rep.interaction,
                "chance": rep.chance, "sequential": rep.sequential}
    kinds = {"source": Source, "family": Family, "interaction": Interaction,
             "chance": ChanceSection, "sequential": SequentialSection}
    for name, section in sections.items():
        assert isinstance(section, kinds[name]), name
        assert dataclasses.is_dataclass(section) and section.__dataclass_params__.frozen, name
        assert _json_clean(section.to_json()) == js[name], name
    # the JSON's shape is the schema's, whichever record writes it
    assert tuple(js["chance"]) == tuple(js["interaction"]) == ("method", "tests")
    assert tuple(js["family"]) == ("m", "source") and tuple(js["sequential"]) == SEQUENTIAL_KEYS
    assert all(tuple(w) == WARNING_KEYS for w in js["warnings"])
    assert all(isinstance(r, SequentialResult) for r in rep.sequential.results)
    assert rep.warnings and all(isinstance(w, DesignWarning) for w in rep.warnings)
    assert js["warnings"] == [w.to_json() for w in rep.warnings]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.family.m = 1  # type: ignore[misc]


def test_dropped_pairs_are_records() -> None:
    rep = report_cases.report_of("overclaim_mixed_code")
    assert rep.dropped and all(isinstance(d, DroppedPair) for d in rep.dropped)
    assert rep.to_dict()["dropped"] == [_json_clean(d.to_json()) for d in rep.dropped]


def test_the_claims_section_holds_the_records() -> None:
    from fusion_sweep.analysis.demo import synthetic_ressformer_results
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.report import Settings, analyze

    rep = analyze(tidy(synthetic_ressformer_results(seeds=3)),
                  Settings(baseline="standard/sinusoidal/add", n_boot=200, claims="ressformer"))
    assert isinstance(rep.claims, ClaimSetResult)
    assert not hasattr(ClaimSetResult, "from_json")  # nothing reads the JSON back
    assert rep.to_dict()["claims"] == _json_clean(rep.claims.to_json())


def test_a_source_names_every_bad_field_at_once() -> None:
    with pytest.raises(AnalysisError, match=r"kind 'csv' is not one of file, mlflow, table; "
                                            r"n_runs must be an integer, not '3'"):
        Source(kind="csv", n_runs="3")  # type: ignore[arg-type]
    with pytest.raises(AnalysisError, match=r"unknown source field\(s\) pth; known: kind, path"):
        Source.of({"kind": "file", "pth": "r.csv"})
    with pytest.raises(AnalysisError, match=r"adaptive must be a mapping, not str"):
        Source.of({"kind": "file", "adaptive": "yes"})


def test_a_sources_json_has_only_what_is_set_in_field_order() -> None:
    assert Source.of(None).to_json() == {"kind": "table"}
    src = Source.of({"kind": "file", "space": {"metric": "test_acc"}, "path": "r.csv"})
    assert list(src.to_json()) == ["kind", "path", "space"]
    sweep = Source("mlflow", sweep="s1", n_runs=4)
    # A sweep launched before the code tag existed says so (null), every other field as set.
    assert sweep.to_json() == {"kind": "mlflow", "sweep": "s1", "n_runs": 4,
                               "code_fingerprint": None}


def test_records_refuse_what_is_not_theirs() -> None:
    with pytest.raises(AnalysisError, match=r"reason 'lost' is not one of missing_trial, "):
        DroppedPair("d", "standard", "sinusoidal", "test_acc", "concat", "add",
                    "standard/sinusoidal/concat", "standard/sinusoidal/add", 1, "lost", "")
    with pytest.raises(AnalysisError, match=r"tests\[0\] is a dict, not an InteractionTest"):
        Interaction("m", ({"verdict": "differs"},))  # type: ignore[arg-type]
    with pytest.raises(AnalysisError, match=r"tests\[0\] is a dict, not a ChanceTest"):
        ChanceSection("m", ({"p": 0.5},))  # type: ignore[arg-type]
    with pytest.raises(AnalysisError, match=r"m must be a whole number >= 0, not -1"):
        Family(-1, "x")
    with pytest.raises(AnalysisError, match=r"a warning needs a code and a message"):
        DesignWarning("", "text")


def test_the_terminal_and_the_page_say_the_sections_in_one_order(tmp_path: Path,
                                                                  svg_figures) -> None:
    """One document (fusion_sweep.analysis.document) for every medium: before, the terminal
    said the claims before the grid and the verdict rule last, the page the rule before its
    claims line; now both say answer, claims, grid, rule, warnings, ..., dropped pairs."""
    from fusion_sweep.analysis.demo import synthetic_ressformer_results
    from fusion_sweep.analysis.document import build_document
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.report import Settings, analyze
    from fusion_sweep.analysis.text import format_text, render_text

    rep = analyze(tidy(synthetic_ressformer_results(seeds=3)),
                  Settings(baseline="standard/sinusoidal/add", n_boot=200, claims="ressformer"))
    text = format_text(rep, width=120, color=False)
    assert text == render_text(build_document(rep), 120)  # the terminal renders the document
    write_report(rep, tmp_path)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    rule = "Verdicts name their estimand"
    for page, marks in ((text, ["The answer (", "The paper's claims (", "Verdict grid", rule,
                                "Warnings:", "Dropped pairs"]),
                        (md, ["## The answer", "The paper's claims (", "## The answer at a glance",
                              rule, "## Design warnings", "## Dropped pairs"]),
                        (html, ["<h2>The answer</h2>", "The paper&#x27;s claims (",
                                'id="verdict-grid"', rule, "<h2>Design warnings</h2>",
                                "<h2>Dropped pairs</h2>"])):
        at = [page.index(m) for m in marks]
        assert at == sorted(at), marks
