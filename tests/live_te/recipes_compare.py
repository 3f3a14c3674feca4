#!/usr/bin/env python3
"""recipes_live.py's truth against the audit (issue 36 item 1), one table row per run: per
microbatch the script's recomputes, those that ran in another FP8 state, under another recipe or
with other kwargs (changes), and of those the kwargs-only ones, against the report's recomputes,
recompute_precision_changes and recompute_kwargs_changes; the microbatch fails exactly where a
recompute changed (or, under DelayedScaling, its counts are off: the verdict is then not compared).
Exit 0 every run agrees, 1 one does not, 2 bad input (one line).

    recipes_compare.py SCRIPT.json=REPORT.json [...]

SCRIPT.json: recipes_live.py's output line under `fp8audit run --max-rows 0`; REPORT.json: `fp8audit
report DIR --format json` of that run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

from live_tables import fail

Row = Tuple[int, int, int]  # recomputes, changes, kwargs-only changes


def script_rows(path: Path) -> Tuple[Dict[str, Any], List[Row]]:
    try:
        run = json.loads(path.read_text().strip().splitlines()[-1])
        rows = [(int(r["recomputes"]), int(r["changes"]), int(r.get("kwargs_changes", 0)))
                for r in run["rows"]]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        fail(f"{path}: not recipes_live.py's output ({type(e).__name__}: {e})")
    return run, rows


def report_rows(path: Path) -> Tuple[List[Row], List[str], bool]:
    """The report's rows, their verdicts, and whether fp8audit.te's fix was in force."""
    try:
        (rank,) = json.loads(path.read_text())["ranks"]
        patched = bool(rank.get("recording", {}).get("te_patched", False))
        mbs = rank.get("microbatches", [])
        rows = [(int(m.get("recomputes", 0)), int(m.get("recompute_precision_changes", 0)),
                 int(m.get("recompute_kwargs_changes", 0))) for m in mbs]
        verdicts = [str(m.get("verdict", "")) for m in mbs]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        fail(f"{path}: not a single-rank `fp8audit report --format json` ({e})")
    if any("through_index" in m for m in mbs):
        fail(f"{path}: folded rows (run under `fp8audit run --max-rows 0`)")
    return rows, verdicts, patched


def cell(rows: List[Row]) -> str:
    out: List[str] = []
    for r in rows:
        text = f"{r[0]}, {r[1]}, {r[2]}"
        if not out or out[-1] != text:
            out.append(text)
    return "; ".join(out) or "-"


def compare(pair: str) -> bool:
    script, sep, report = pair.partition("=")
    if not sep or not script or not report:
        fail(f"{pair}: not SCRIPT.json=REPORT.json")
    run, truth = script_rows(Path(script))
    seen, verdicts, patched = report_rows(Path(report))
    delayed = run.get("recipe") == "delayed"
    verdicts_ok = delayed or all(v == ("FAIL" if t[1] > 0 else "PASS")
                                 for t, v in zip(truth, verdicts))
    agree = bool(truth) and truth == seen and verdicts_ok
    args = " ".join(f"{k}={run[k]}" for k in ("recipe", "checkpoint", "kwargs", "flip")
                    if run.get(k) not in (None, False)) + (" --fix-te" if patched else "")
    print(f"| {Path(script).stem}: {args} | {cell(truth)} | {cell(seen)} | {' '.join(sorted(set(verdicts))) or '-'} | "
          f"{run.get('error') or '-'} | {'yes' if agree else 'NO'} |")
    return agree


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pairs", nargs="+", metavar="SCRIPT.json=REPORT.json")
    args = p.parse_args()
    print("| run | script: recomputes, changes, kwargs (per microbatch) | agent | verdicts | "
          "error | agree |")
    print("|---|---|---|---|---|---|")
    results = [compare(pair) for pair in args.pairs]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
