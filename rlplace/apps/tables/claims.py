"""The papers' claims as checks over result records: each decides holds / does not hold and
gives the numbers it looked at.

A record is a dict with at least ``model`` (the setting's key in the table config) and
``placer``; the checks read ``step_time``, ``oom`` and whatever a ``value`` function picks.
``None`` (not checked) means a record the claim needs is missing, e.g. a placer that could not
run in this mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

Records = Sequence[Mapping]
Check = Callable[[Records], tuple[bool | None, str]]


@dataclass(frozen=True)
class Verdict:
    id: str
    claim: str
    holds: bool | None
    numbers: str
    why: str = ""

    def line(self) -> str:
        status = {True: "holds", False: "does not hold", None: "not checked"}[self.holds]
        why = f" Why: {self.why}" if self.why and self.holds is not True else ""
        return f"- **{status}** — {self.claim}: {self.numbers}.{why}"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    check: Check

    def verdict(self, records: Records) -> Verdict:
        holds, numbers = self.check(records)
        return Verdict(self.id, self.text, holds, numbers)


def find(records: Records, model: str, placer: str, **where) -> Mapping | None:
    """The one record of ``placer`` on ``model`` (and ``where``), or None."""
    hits = [r for r in records if r.get("model") == model and r.get("placer") == placer
            and all(r.get(k) == v for k, v in where.items())]
    return hits[0] if len(hits) == 1 else None


def step(r: Mapping, value: str = "step_time") -> str:
    """The compared number as text: seconds for times, OOM for a step time that ran out of memory."""
    if value == "step_time" and r.get("oom"):
        return "OOM"
    return f"{r[value]:.4g}" + (" s" if value.endswith("_time") else "")


def _num(r: Mapping, value: str) -> float:
    """The compared number; an OOM step time counts as infinitely slow."""
    return float("inf") if value == "step_time" and r.get("oom") else float(r[value])


def _each(models: Sequence[str], pairs: Sequence[tuple[str, str]], where: Mapping,
          test: Callable[[float], bool], value: str = "step_time") -> Check:
    """Holds when ``test(a / b)`` holds for every model and (a, b) placer pair, comparing
    ``value`` (an OOM step time is infinite: inf / x = inf, x / inf = 0, inf / inf = nan, and
    every test is False on nan)."""

    def check(records: Records) -> tuple[bool | None, str]:
        if not models or not pairs:
            return None, "no such setting in this run"
        parts, ok = [], True
        for m in models:
            for pa, pb in pairs:
                a, b = find(records, m, pa, **where), find(records, m, pb, **where)
                if a is None or b is None:
                    return None, f"no record of {pa if a is None else pb} on {m}"
                x, y = _num(a, value), _num(b, value)
                with np.errstate(all="ignore"):
                    ratio = float(np.divide(x, y)) if y != 0 else float("inf")
                ok &= bool(test(ratio))
                shown = f" ({(ratio - 1) * 100:+.1f}%)" if np.isfinite(ratio) and ratio > 0 else ""
                parts.append(f"{m}: {pa} {step(a, value)} vs {pb} {step(b, value)}{shown}")
        return ok, "; ".join(parts)

    return check


def faster(id: str, text: str, models: Sequence[str], pairs: Sequence[tuple[str, str]],
           margin: float = 0.0, value: str = "step_time", **where) -> Claim:
    """a < b × (1 - margin) for every pair: a is faster by at least ``margin``."""
    return Claim(id, text, _each(models, pairs, where, lambda r: r < 1 - margin, value))


def slower(id: str, text: str, models: Sequence[str], pairs: Sequence[tuple[str, str]],
           margin: float = 0.0, value: str = "step_time", **where) -> Claim:
    """a > b × (1 + margin) for every pair."""
    return Claim(id, text, _each(models, pairs, where, lambda r: r > 1 + margin, value))


def within(id: str, text: str, models: Sequence[str], pairs: Sequence[tuple[str, str]],
           tolerance: float, value: str = "step_time", **where) -> Claim:
    """|a / b - 1| <= tolerance for every pair (an OOM on either side fails)."""
    return Claim(id, text, _each(models, pairs, where, lambda r: abs(r - 1) <= tolerance, value))


def no_slower(id: str, text: str, models: Sequence[str], pairs: Sequence[tuple[str, str]],
              tolerance: float = 0.0, value: str = "step_time", **where) -> Claim:
    """a <= b × (1 + tolerance) for every pair."""
    return Claim(id, text, _each(models, pairs, where, lambda r: r <= 1 + tolerance, value))


def oom(id: str, text: str, cases: Sequence[tuple[str, str]], expected: bool = True, **where) -> Claim:
    """Every (model, placer) runs out of memory (``expected``) or fits (not ``expected``)."""
    return Claim(id, text, _each_case(cases, where, lambda r: bool(r.get("oom")) == expected, step))


def value_between(id: str, text: str, cases: Sequence[tuple[str, str]], value: Callable[[Mapping], float],
                  low: float = float("-inf"), high: float = float("inf"), fmt: str = "{:.3g}",
                  **where) -> Claim:
    """``low <= value(record) <= high`` for every (model, placer); ``value`` may read any field."""
    return Claim(id, text, _each_case(cases, where, lambda r: low <= value(r) <= high,
                                      lambda r: fmt.format(value(r))))


def _each_case(cases: Sequence[tuple[str, str]], where: Mapping, test: Callable[[Mapping], bool],
               describe: Callable[[Mapping], str]) -> Callable[[Records], tuple[bool | None, str]]:
    """A check that ``test`` holds for the record of every (model, placer) in ``cases``."""

    def check(records: Records) -> tuple[bool | None, str]:
        if not cases:
            return None, "no such setting in this run"
        parts, ok = [], True
        for m, p in cases:
            r = find(records, m, p, **where)
            if r is None:
                return None, f"no record of {p} on {m}"
            ok &= test(r)
            parts.append(f"{m}: {p} {describe(r)}")
        return ok, "; ".join(parts)

    return check


def verdicts(claims: Sequence[Claim], records: Records) -> list[Verdict]:
    return [c.verdict(records) for c in claims]
