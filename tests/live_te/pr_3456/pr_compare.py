#!/usr/bin/env python3
"""The TE PR #3456 live table from one run.sh results directory: per backward placement and
layout, TE's own counter (run alone, and in the agent's run), the agent's counts, and the te-3456
model's prediction (`fp8audit model --semantics te-3456`); each row also checks that TE's PR state
is healthy after every microbatch (no update pending, no scope open, no callback slot held). Under
the table: each agent run's verdict and the semantics the report chose (te-3456, told by TE's
scheduling, not its version). Exit 1 when a row
disagrees or a report did not choose te-3456, 2 on missing or malformed input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from compare import MODEL_LAYOUTS, cell  # noqa: E402
from live_tables import fail, report_counts, split_like  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
# The layouts te_counts.py does not have: each modelled by its scenario file (they place their
# backward themselves, so both placements' rows use the same one).
SCENARIOS = {layout: f"tests/live_te/scenarios/pr_3456/{layout}.textproto"
             for layout in ("torch-reentrant-per-layer", "two-backward", "two-backward-scope")}
Rows = Dict[str, List[dict]]


def script_rows(path: Path) -> Rows:
    out: Rows = {}
    try:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out.setdefault(row["layout"], []).append(row)
    except (OSError, ValueError, KeyError) as e:
        fail(f"{path}: {e}")
    return out


def counts(rows: Sequence[dict]) -> List[Tuple[int, int]]:
    return [(r["forward"], r["backward"]) for r in rows]


def model(fp8audit: str, layout: str, backward: str) -> str:
    if layout in MODEL_LAYOUTS:
        layers, per_layer, checkpoint, segments = MODEL_LAYOUTS[layout]
        what = ["--layers", str(layers), "--linears-per-layer", str(per_layer), "--checkpoint",
                checkpoint, "--segments", segments, "--backward", backward]
    elif (REPO / SCENARIOS.get(layout, "-")).is_file():
        what = [str(REPO / SCENARIOS[layout])]
    else:
        return "no scenario"
    cmd = [fp8audit, "model", "--semantics", "te-3456", "--microbatches", "2", "--format",
           "json"] + what
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return cell([(m.get("forward_updates", 0), m.get("backward_updates", 0))
                 for m in result["microbatches"]])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="directory written by run.sh")
    p.add_argument("--fp8audit", default="fp8audit", help="the fp8audit executable")
    args = p.parse_args()
    print("| backward | layout | TE counter | TE counter (agent's run) | agent | model te-3456 "
          "| PR state healthy | agree |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    verdicts = []
    for backward in ("after", "inside"):
        plain = script_rows(args.results / f"plain_{backward}.jsonl")
        same = script_rows(args.results / f"agent_{backward}.jsonl")
        report = args.results / f"agent_{backward}.json"
        agent = split_like(plain, report_counts(report), str(report))
        try:
            (rank,) = json.loads(report.read_text())["ranks"]
        except (OSError, ValueError, KeyError) as e:
            fail(f"{report}: {e}")
        recording = rank.get("recording", {})
        semantics = (recording.get("semantics", ""), recording.get("semantics_from", ""))
        verdicts.append(f"- backward {backward}: verdict {rank.get('verdict', '?')}, "
                        f"semantics {semantics[0] or 'none'} (from {semantics[1] or '?'})")
        bad += semantics != ("te-3456", "scheduling")
        for layout, rows in plain.items():
            healthy = all(not r["pending"] and r["depth"] == 0 and r["slot"] is None
                          for r in rows + same.get(layout, []))
            cells = [cell(counts(rows)), cell(counts(same.get(layout, []))),
                     cell(list(agent[layout])), model(args.fp8audit, layout, backward)]
            agree = len(set(cells)) == 1 and " " not in cells[0] and healthy
            bad += not agree
            print(f"| {backward} | {layout} | " + " | ".join(cells) +
                  f" | {'yes' if healthy else 'NO'} | {'yes' if agree else 'NO'} |")
    print("\n" + "\n".join(verdicts))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
