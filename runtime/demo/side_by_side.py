"""The demo's side-by-side table: for each microbatch fp8-repro ran (its layout, seed and index, in
run order), what the runtime itself counted and what the agent counted in the audited run, under
TE's ownership and under the fixed one. Rows are matched by position, each label carrying the
runtime's own count, so a microbatch missing from a report shows as a disagreement, never as a
shifted table. Consecutive microbatches of one layout and seed with the same counts share a row.

Usage: side_by_side.py TE_REPRO TE_REPORT_JSON FIXED_REPRO FIXED_REPORT_JSON
  *_REPRO: fp8-repro's standard output; *_REPORT_JSON: `fp8audit report DIR --format json`.
Exit status: 0 when agent and runtime agree on every microbatch, 1 when not, 2 on unreadable input.
Standard library only (the demo runs it before any virtual environment is involved)."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

# "reentrant-single         seed=0 updates/microbatch (fwd/bwd): 2/3 2/3 | loss finite, ..."
REPRO_LINE = re.compile(r"^(\S+)\s+seed=(\d+) updates/microbatch \(fwd/bwd\):((?: \d+/\d+)+)")

Counts = Tuple[int, int]


@dataclass(frozen=True)
class Cell:
    runtime: Counts
    agent: Optional[Counts]  # None: the report has no such microbatch
    verdict: str

    def agrees(self) -> bool:
        return self.agent == self.runtime


@dataclass(frozen=True)
class Row:
    layout: str
    seed: int
    first: int  # microbatch indices within the layout and seed, first..last
    last: int
    te: Cell
    fixed: Cell


def runtime_counts(text: str) -> List[Tuple[str, int, int, Counts]]:
    """(layout, seed, index, (forward, backward)) of every microbatch fp8-repro printed, in order."""
    out = []
    for line in text.splitlines():
        m = REPRO_LINE.match(line)
        if not m:
            continue
        for i, pair in enumerate(m.group(3).split()):
            f, b = pair.split("/")
            out.append((m.group(1), int(m.group(2)), i, (int(f), int(b))))
    return out


def agent_counts(report: Dict[str, Any]) -> List[Tuple[Counts, str]]:
    """((forward, backward), verdict) of every microbatch of the report's one trace, in order."""
    ranks = report.get("ranks", [])
    if len(ranks) != 1:
        raise ValueError(f"expected the report of one process, found {len(ranks)} traces")
    return [((m.get("forward_updates", 0), m.get("backward_updates", 0)), m.get("verdict", "?"))
            for m in ranks[0].get("microbatches", [])]


def build(te_repro: str, te_report: Dict[str, Any], fixed_repro: str,
          fixed_report: Dict[str, Any]) -> List[Row]:
    """The table's rows; raises ValueError where the two runs did not run the same microbatches."""
    te_runtime, fixed_runtime = runtime_counts(te_repro), runtime_counts(fixed_repro)
    if [r[:3] for r in te_runtime] != [r[:3] for r in fixed_runtime]:
        raise ValueError("the two fp8-repro runs ran different layouts, seeds or microbatches")
    if not te_runtime:
        raise ValueError("fp8-repro printed no 'LAYOUT seed=S updates/microbatch' line")
    te_agent, fixed_agent = agent_counts(te_report), agent_counts(fixed_report)

    def cell(runtime: Counts, agent: List[Tuple[Counts, str]], i: int) -> Cell:
        if i < len(agent):
            return Cell(runtime, agent[i][0], agent[i][1])
        return Cell(runtime, None, "missing")

    rows: List[Row] = []
    for i, ((layout, seed, index, te_counts), fixed_mb) in enumerate(zip(te_runtime,
                                                                         fixed_runtime)):
        te, fixed = cell(te_counts, te_agent, i), cell(fixed_mb[3], fixed_agent, i)
        last = rows[-1] if rows else None
        if last and (last.layout, last.seed, last.te, last.fixed) == (layout, seed, te, fixed):
            rows[-1] = Row(layout, seed, last.first, index, te, fixed)
        else:
            rows.append(Row(layout, seed, index, index, te, fixed))
    extra = max(len(te_agent), len(fixed_agent)) - len(te_runtime)
    if extra > 0:
        raise ValueError(f"the agent counted {extra} microbatch(es) more than fp8-repro ran")
    return rows


def _pair(c: Optional[Counts]) -> str:
    return "-" if c is None else f"{c[0]}/{c[1]}"


def render(rows: Sequence[Row], te_name: str = "te-legacy") -> str:
    header = ("layout", "seed", "mb", f"{te_name}: runtime", "agent", "verdict",
              "fixed: runtime", "agent", "verdict")
    table = [header]
    for r in rows:
        mb = str(r.first) if r.first == r.last else f"{r.first}-{r.last}"
        table.append((r.layout, str(r.seed), mb, _pair(r.te.runtime), _pair(r.te.agent),
                      r.te.verdict if r.te.agrees() else f"{r.te.verdict} (agent differs)",
                      _pair(r.fixed.runtime), _pair(r.fixed.agent),
                      r.fixed.verdict if r.fixed.agrees() else
                      f"{r.fixed.verdict} (agent differs)"))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
                     for line in table) + "\n"


def summary(rows: Sequence[Row]) -> Tuple[bool, str]:
    total = sum(r.last - r.first + 1 for r in rows)
    differing = [r for r in rows if not (r.te.agrees() and r.fixed.agrees())]
    if not differing:
        return True, (f"agent and runtime agree on all {total} microbatches under both "
                      f"ownerships")
    n = sum(r.last - r.first + 1 for r in differing)
    return False, (f"agent and runtime disagree on {n} of {total} microbatches (rows marked "
                   f"'agent differs')")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 4:
        print("usage: side_by_side.py TE_REPRO TE_REPORT_JSON FIXED_REPRO FIXED_REPORT_JSON",
              file=sys.stderr)
        return 2
    try:
        texts = [open(p, encoding="utf-8", errors="replace").read() for p in argv]
        rows = build(texts[0], json.loads(texts[1]), texts[2], json.loads(texts[3]))
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        print(f"side_by_side.py: {e}", file=sys.stderr)
        return 2
    te_name = "te-legacy"
    first = texts[0].splitlines()[0] if texts[0] else ""
    m = re.search(r"semantics=(\S+)", first)
    if m:
        te_name = m.group(1)
    sys.stdout.write(render(rows, te_name))
    ok, line = summary(rows)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
