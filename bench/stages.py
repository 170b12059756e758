"""Stage times per kind of request, for the benchmarks that say where a request's time goes (bench/proxy.py,
bench/serving.py): every request's milliseconds per stage, summarised as p50 / p99 and the number of requests that
went through the stage, printed as one table (a row a stage, a column a kind) and written into the result JSON.

A stage is measured where it runs (the service's ``Server-Timing`` header, its histograms, a deployment's own
clock); a stage that can only be had by subtraction says so in its ``how`` (``derived: ...``), so that a regression
points at the stage that moved, and a derived row is read as what it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.report import Table


def pct(values: list[float], q: float) -> float:
    """The sample at quantile ``q`` (nearest rank): a p99 of fewer than 100 samples is their largest or next."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def parse_server_timing(value: str) -> dict[str, float]:
    """A ``Server-Timing`` header's ``name;dur=ms`` entries (the first of a name; entries without dur are left)."""
    out: dict[str, float] = {}
    for entry in value.split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        for param in params:
            key, _, ms = param.partition("=")
            if key == "dur" and name and name not in out:
                out[name] = float(ms)
    return out


@dataclass
class StageTimes:
    """Per kind of request, per stage, every request's milliseconds; ``how`` says how each stage is measured."""

    how: dict[str, str]
    ms: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)

    def request(self, kind: str) -> None:
        """One more request of ``kind`` (a stage that fewer went through shows its count)."""
        self.requests[kind] = self.requests.get(kind, 0) + 1

    def add(self, kind: str, stage: str, ms: float) -> None:
        self.ms.setdefault(kind, {}).setdefault(stage, []).append(ms)

    def add_all(self, kind: str, stages: Mapping[str, float]) -> None:
        for stage, ms in stages.items():
            self.add(kind, stage, ms)

    def summary(self, kind: str) -> dict[str, dict[str, float]]:
        """``{stage: {p50, p99, n}}`` in the order of ``how`` (then any other stage, by name)."""
        found = self.ms.get(kind, {})
        order = [s for s in self.how if s in found] + sorted(s for s in found if s not in self.how)
        return {
            s: {"p50": round(pct(found[s], 0.5), 2), "p99": round(pct(found[s], 0.99), 2), "n": len(found[s])}
            for s in order
        }

    def result(self, kinds: Iterable[str]) -> dict[str, Any]:
        """What the result JSON holds: each kind's summary, its request count, and how each stage is measured."""
        kinds = list(kinds)
        return {
            "by_kind": {k: {"requests": self.requests.get(k, 0), "stages_ms": self.summary(k)} for k in kinds},
            "how": {s: h for s, h in self.how.items() if any(s in self.ms.get(k, {}) for k in kinds)},
        }

    def table(self, title: str, kinds: Mapping[str, str]) -> Table:
        """A row a stage, a column a kind (``kinds``: key to column title): ``p50 / p99`` ms, with ``(n of N)`` where
        fewer requests than the kind's went through the stage."""
        summaries = {k: self.summary(k) for k in kinds}
        stages = [s for s in self.how if any(s in summary for summary in summaries.values())]
        stages += sorted({s for summary in summaries.values() for s in summary} - set(stages))
        rows = []
        for stage in stages:
            cells = []
            for kind, summary in summaries.items():
                got = summary.get(stage)
                if got is None:
                    cells.append("")
                    continue
                cell = f"{got['p50']:.1f} / {got['p99']:.1f}"
                total = self.requests.get(kind, 0)
                cells.append(cell if got["n"] >= total else f"{cell} ({got['n']:.0f} of {total})")
            rows.append([stage, self.how.get(stage, ""), *cells])
        columns = ["stage", "how it is measured", *(f"{name} p50 / p99 ms" for name in kinds.values())]
        return Table(title=title, columns=columns, rows=rows)
