"""The report's sections beside its comparisons and arms, as frozen records: where the
results come from (`Source`), the fixed-n Holm family (`Family`), the design warnings
(`DesignWarning`), the dropped pairs (`DroppedPair`), the across-regime tests
(`Interaction`) and the chance tests (`ChanceSection`).

Each is validated when built (every problem in one `AnalysisError`) and written to JSON in
one place, its `to_json`; :class:`fusion_sweep.analysis.report.Report` holds them and
`Report.to_dict` only calls `to_json`. The renderers read them by attribute.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, Sequence

from fusion_sweep.analysis.records import ChanceTest, InteractionTest
from fusion_sweep.analysis.schema import DROP_REASONS, DROPPED_KEYS, AnalysisError

# Where results can come from: a results file, an MLflow sweep, a table handed to analyze().
SOURCE_KINDS: tuple[str, ...] = ("file", "mlflow", "table")


def _check(record: object, problems: list[str]) -> None:
    """Raise every problem of a record at once."""
    if problems:
        raise AnalysisError(f"invalid {type(record).__name__}: " + "; ".join(problems))


@dataclass(frozen=True)
class Source:
    """Where the results come from: the report's `source` (`to_json`). A results file has
    kind "file" and its path; an MLflow sweep (kind "mlflow") its store, experiment, parent
    run, trial-run count and search-space choices (space_choices), and the parent's optional
    tags (known_datasets, known_fusions, adaptive, comparison_family: None when the launch
    logged none). A results file's sweep columns fill adaptive and comparison_family too
    (fusion_sweep.analysis.report.sweep_columns); platforms: the platforms the report's
    trials ran on (fusion_sweep.analysis.platforms.platforms_of), None before the report
    reads them."""

    kind: str
    path: str | None = None
    tracking_uri: str | None = None
    experiment: str | None = None
    sweep: str | None = None
    parent_run_id: str | None = None
    experiment_id: str | None = None
    n_runs: int | None = None
    space: Mapping[str, Any] | None = None
    code_fingerprint: str | None = None
    known_datasets: list[str] | None = None
    known_fusions: list[str] | None = None
    adaptive: Mapping[str, Any] | None = None
    comparison_family: Mapping[str, Any] | None = None
    platforms: Sequence[Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in SOURCE_KINDS:
            problems.append(f"kind {self.kind!r} is not one of {', '.join(SOURCE_KINDS)}")
        if self.n_runs is not None and not isinstance(self.n_runs, int):
            problems.append(f"n_runs must be an integer, not {self.n_runs!r}")
        for name in ("space", "adaptive", "comparison_family"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                problems.append(f"{name} must be a mapping, not {type(value).__name__}")
        _check(self, problems)

    @classmethod
    def of(cls, source: "Source | Mapping[str, Any] | None") -> "Source":
        """A Source as given, or from its `to_json` dict (None: a table handed to analyze);
        an unknown key is an error naming the known ones."""
        if source is None:
            return cls(kind="table")
        if isinstance(source, Source):
            return source
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(source) - set(known))
        if unknown:
            raise AnalysisError(f"unknown source field(s) {', '.join(unknown)}; known: "
                                f"{', '.join(known)}")
        return cls(**{"kind": "table", **source})

    @property
    def is_mlflow(self) -> bool:
        return self.kind == "mlflow"

    def to_json(self) -> dict[str, Any]:
        """The `source` entry, in field order, each field only where it is set; a sweep's
        code_fingerprint always (null: launched before the tag existed)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None
                or (self.is_mlflow and f.name == "code_fingerprint")}


@dataclass(frozen=True)
class Family:
    """The fixed-n Holm family: its size m, never shrunk by a selection, and where it came
    from (fusion_sweep.analysis.report.fixed_family)."""

    m: int
    source: str

    def __post_init__(self) -> None:
        _check(self, [] if isinstance(self.m, int) and self.m >= 0
               else [f"m must be a whole number >= 0, not {self.m!r}"])

    def to_json(self) -> dict[str, Any]:
        return {"m": self.m, "source": self.source}


@dataclass(frozen=True)
class DesignWarning:
    """One entry of the report's `warnings`: a code scripts match, a sentence for a reader."""

    code: str
    message: str

    def __post_init__(self) -> None:
        _check(self, [] if self.code and isinstance(self.message, str)
               else [f"a warning needs a code and a message, got {self.code!r}"])

    @classmethod
    def of(cls, w: "DesignWarning | Mapping[str, str]") -> "DesignWarning":
        """A warning as given, or from a stage's {"code", "message"} dict."""
        return w if isinstance(w, DesignWarning) else cls(**w)

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class DroppedPair:
    """A pair (or, for superseded_code, a run) left out of every comparison, and why
    (DROPPED_KEYS; reason one of DROP_REASONS). A superseded run has no metric, baseline or
    baseline_variant."""

    dataset: str
    encoder: str
    pe: str
    metric: str | None
    fusion: str
    baseline: str | None
    variant: str
    baseline_variant: str | None
    seed: int
    reason: str
    detail: str

    def __post_init__(self) -> None:
        _check(self, [] if self.reason in DROP_REASONS
               else [f"reason {self.reason!r} is not one of {', '.join(DROP_REASONS)}"])

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in DROPPED_KEYS}


assert tuple(f.name for f in fields(DroppedPair)) == DROPPED_KEYS, "DroppedPair != DROPPED_KEYS"


@dataclass(frozen=True)
class _MethodTests:
    """A section that is one method's tests: the words of the method and the tests, each a
    `kind` record (checked when built)."""

    method: str
    tests: tuple = ()
    kind: ClassVar[type] = object

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", tuple(self.tests))
        name = self.kind.__name__
        article = "an" if name[0] in "AEIOU" else "a"
        _check(self, [f"tests[{i}] is a {type(t).__name__}, not {article} {name}"
                      for i, t in enumerate(self.tests) if not isinstance(t, self.kind)])

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "tests": [t.to_json() for t in self.tests]}


@dataclass(frozen=True)
class Interaction(_MethodTests):
    """The across-regime tests (fusion_sweep.analysis.regimes) and the words of their method."""

    tests: tuple[InteractionTest, ...] = ()
    kind: ClassVar[type] = InteractionTest


@dataclass(frozen=True)
class ChanceSection(_MethodTests):
    """Each arm's test against chance (fusion_sweep.analysis.chance) and its method."""

    tests: tuple[ChanceTest, ...] = ()
    kind: ClassVar[type] = ChanceTest
