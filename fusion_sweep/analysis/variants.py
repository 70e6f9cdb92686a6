"""Variants and the comparison axis: what is compared with what, within a dataset.

A *variant* is ``(encoder, pe, fusion)`` within one dataset, labelled ``"encoder/pe/fusion"``
(e.g. ``standard/sinusoidal/add``). An *arm* is one variant on one dataset.

The comparison axis is defined once, by the baseline (``--baseline``, else the sweep's
``baseline`` param):

- a **fusion name** (``add``) fixes the fusion: within each ``(dataset, encoder, pe)`` group
  every other fusion is compared with that fusion (the fusion study);
- a **full variant label** (``standard/sinusoidal/add``) fixes all three fields: within each
  dataset every other variant present is compared with that one (e.g. ReSSFormer without a
  PE against the standard encoder with sinusoidal PE).

In general: the baseline fixes some variant fields; a *group* is the dataset plus the
variant fields the baseline does NOT fix; within a group the reference is the arm that
matches the baseline, and every other arm of the group is compared with it (``--pairs
all``: every pair of arms in the group, the earlier in :meth:`Axis.order` as reference).
The fusion comparison is the special case that fixes only the fusion.

Labels: :meth:`Axis.short` writes a variant by the fields the baseline fixes (the fusion
name, or the full label); tables name the group's free fields in their title, so a short
label is never ambiguous. :meth:`Axis.path` omits the encoder when it is the standard one,
which keeps every fusion-study message exactly as it was before the encoder axis.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from fusion_sweep.analysis.schema import VARIANT_COLUMNS, AnalysisError
from fusion_sweep.errors import choices, did_you_mean
from fusion_sweep.schema import shown

BASELINE_FORMS = ("a fusion name (e.g. add)",
                  "a full variant label encoder/pe/fusion (e.g. standard/sinusoidal/add)")


@dataclass(frozen=True, order=True)
class Variant:
    """(encoder, pe, fusion): what is compared within one dataset."""

    encoder: str
    pe: str
    fusion: str

    @property
    def label(self) -> str:
        return "/".join(self.fields())

    def fields(self) -> tuple[str, str, str]:
        return (self.encoder, self.pe, self.fusion)

    def get(self, field: str) -> str:
        return getattr(self, field)

    @classmethod
    def parse(cls, text: str) -> "Variant":
        """"encoder/pe/fusion" -> Variant; AnalysisError naming the form otherwise."""
        parts = [p.strip() for p in str(text).split("/")]
        if len(parts) != len(VARIANT_COLUMNS) or not all(parts):
            raise AnalysisError(f"variant label {text!r} must be encoder/pe/fusion "
                                "(e.g. standard/sinusoidal/add)")
        return cls(*parts)

    @classmethod
    def of(cls, row: object) -> "Variant":
        """The variant of a tidy-table row (a Series or a namedtuple)."""
        get = row.get if hasattr(row, "get") else lambda k: getattr(row, k)
        return cls(*(str(get(c)) for c in VARIANT_COLUMNS))


@dataclass(frozen=True)
class Axis:
    """The comparison axis a baseline spec defines (see the module docstring).

    spec: the baseline as given; fixed: the variant fields it fixes (in VARIANT_COLUMNS
    order); values: their values.
    """

    spec: str
    fixed: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def free(self) -> tuple[str, ...]:
        """The variant fields a group holds constant (those the baseline leaves open)."""
        return tuple(f for f in VARIANT_COLUMNS if f not in self.fixed)

    @property
    def is_fusion(self) -> bool:
        """The fusion study's axis: only the fusion is fixed."""
        return self.fixed == ("fusion",)

    @property
    def noun(self) -> str:
        """What the compared things are called: 'fusion' or 'variant'."""
        return "fusion" if self.is_fusion else "variant"

    def value(self, field: str) -> str | None:
        """The baseline's value of a variant field, None when it does not fix it."""
        return dict(zip(self.fixed, self.values)).get(field)

    def group(self, v: Variant) -> tuple[str, ...]:
        """The group key of a variant: its free fields' values."""
        return tuple(v.get(f) for f in self.free)

    def matches(self, v: Variant) -> bool:
        return all(v.get(f) == x for f, x in zip(self.fixed, self.values))

    def reference(self, group: tuple[str, ...]) -> Variant:
        """The reference variant of a group: the group's values plus the baseline's."""
        known = {**dict(zip(self.free, group)), **dict(zip(self.fixed, self.values))}
        return Variant(*(known[f] for f in VARIANT_COLUMNS))

    def short(self, v: Variant) -> str:
        """A variant by the fields the baseline fixes: the fusion name, or the full label."""
        return "/".join(v.get(f) for f in self.fixed)

    def order(self, variants: Iterable[Variant], group: tuple[str, ...]) -> list[Variant]:
        """The group's reference first (present or not), then the others by label."""
        ref = self.reference(group)
        return [ref] + sorted({v for v in variants if v != ref}, key=lambda v: v.label)

    def pairs(self, variants: Iterable[Variant], group: tuple[str, ...],
              mode: str) -> list[tuple[Variant, Variant]]:
        """(arm, reference) pairs of a group: vs the baseline, or all pairs."""
        order = self.order(variants, group)
        if mode == "baseline":
            return [(v, order[0]) for v in order[1:]]
        return [(order[j], order[i]) for i in range(len(order)) for j in range(i + 1, len(order))]

    def path(self, group: tuple[str, ...]) -> str:
        """A group as a path for messages: 'sinusoidal', 'ressformer/none', '' (no free
        field). The standard encoder is left out (it is the default)."""
        return "/".join(shown(dict(zip(self.free, group))).values())

    def title(self, group: tuple[str, ...]) -> str:
        """A group for table titles: 'pe=sinusoidal', 'encoder=ressformer · pe=none', ''."""
        return " · ".join(f"{k}={v}" for k, v in shown(dict(zip(self.free, group))).items())


def parse_baseline(spec: str) -> Axis:
    """A fusion name or a full variant label -> Axis; AnalysisError naming both forms."""
    text = str(spec).strip()
    if "/" in text:
        try:
            v = Variant.parse(text)
        except AnalysisError:
            raise AnalysisError(f"--baseline must be {BASELINE_FORMS[0]} or {BASELINE_FORMS[1]}; "
                                f"got {spec!r}") from None
        return Axis(v.label, tuple(VARIANT_COLUMNS), v.fields())
    if not text:
        raise AnalysisError(f"--baseline must be {BASELINE_FORMS[0]} or {BASELINE_FORMS[1]}; "
                            "got an empty string")
    return Axis(text, ("fusion",), (text,))


def check_present(axis: Axis, variants: Iterable[Variant]) -> None:
    """AnalysisError when no arm in the data matches the baseline, naming what is there."""
    variants = set(variants)
    if any(axis.matches(v) for v in variants):
        return
    kind, present = (("fusion", sorted({v.fusion for v in variants})) if axis.is_fusion
                     else ("variant", sorted(v.label for v in variants)))
    raise AnalysisError(f"baseline {kind} {axis.spec!r} is absent from the data"
                        f"{did_you_mean(axis.spec, present)}; {kind}s present: {choices(present)}")
