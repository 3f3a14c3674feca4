#!/usr/bin/env python3
"""The TE PR #3456 live table from one run.sh results directory: per backward placement and
layout, TE's own counter (run alone, and in the agent's run), the agent's counts, and the te-3456
model's prediction (`fp8audit model --semantics te-3456`); each row also checks that TE's PR state
is healthy after every microbatch (no update pending, no scope open, no callback slot held). Under
the table: each agent run's verdict and the semantics the report chose (te-3456, told by TE's
scheduling, not its version). Every layout must have run --microbatches microbatches in both runs.
Exit 1 when a row disagrees, a layout is missing or a report did not choose te-3456; 2 on missing
or malformed input (one line)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from compare import MODEL_LAYOUTS, cell  # noqa: E402
from live_tables import fail, report_counts, split_like  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
# The layouts te_counts.py does not have: each modelled by its scenario file (they place their
# backward themselves, so both placements' rows use the same one).
SCENARIOS = {layout: f"tests/live_te/scenarios/pr_3456/{layout}.textproto"
             for layout in ("torch-reentrant-per-layer", "two-backward", "two-backward-scope")}
LAYOUTS = list(MODEL_LAYOUTS) + list(SCENARIOS)  # pr_live.py's, in its order
FIELDS = ("layout", "forward", "backward", "pending", "depth", "slot")
Rows = Dict[str, List[dict]]


def script_rows(path: Path) -> Rows:
    out: Rows = {}
    try:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            row = json.loads(line)
            missing = [f for f in FIELDS if f not in row]
            if missing:
                fail(f"{path}:{number}: no {', '.join(missing)}")
            out.setdefault(row["layout"], []).append(row)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    return out


def counts(rows: List[dict]) -> List[Tuple[int, int]]:
    return [(r["forward"], r["backward"]) for r in rows]


def model(fp8audit: str, layout: str, backward: str) -> str:
    if layout in MODEL_LAYOUTS:
        layers, per_layer, checkpoint, segments = MODEL_LAYOUTS[layout]
        what = ["--layers", str(layers), "--linears-per-layer", str(per_layer), "--checkpoint",
                checkpoint, "--segments", segments, "--backward", backward]
    else:
        what = [str(REPO / SCENARIOS[layout])]
    cmd = [fp8audit, "model", "--semantics", "te-3456", "--microbatches", "2", "--format",
           "json"] + what
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"fp8audit model ({layout}): {done.stderr.strip()}")
        return cell([(m.get("forward_updates", 0), m.get("backward_updates", 0))
                     for m in json.loads(done.stdout)["microbatches"]])
    except (OSError, ValueError, KeyError) as e:
        fail(f"fp8audit model ({layout}): {e}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="directory written by run.sh")
    p.add_argument("--fp8audit", default="fp8audit", help="the fp8audit executable")
    p.add_argument("--microbatches", type=int, default=3, help="pr_live.py's, per layout")
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
        for layout in LAYOUTS:
            rows, again = plain.get(layout, []), same.get(layout, [])
            if len(rows) != args.microbatches or len(again) != args.microbatches:
                print(f"| {backward} | {layout} | {len(rows)} of {args.microbatches} "
                      f"microbatches | {len(again)} of {args.microbatches} | | | | NO |")
                bad += 1
                continue
            healthy = all(not r["pending"] and r["depth"] == 0 and r["slot"] is None
                          for r in rows + again)
            cells = [cell(counts(rows)), cell(counts(again)), cell(list(agent[layout])),
                     model(args.fp8audit, layout, backward)]
            agree = len(set(cells)) == 1 and " " not in cells[0] and healthy
            bad += not agree
            print(f"| {backward} | {layout} | " + " | ".join(cells) +
                  f" | {'yes' if healthy else 'NO'} | {'yes' if agree else 'NO'} |")
    print("\n" + "\n".join(verdicts))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
