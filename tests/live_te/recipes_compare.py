#!/usr/bin/env python3
"""recipes_live.py's truth against the audit (issue 36 item 1), one table row per run: per
microbatch the script's recomputes, those that ran in another FP8 state, under another recipe or
with other kwargs (changes), and of those the kwargs-only ones, against the report's recomputes,
recompute_precision_changes and recompute_kwargs_changes; the microbatch fails where a recompute
changed (under DelayedScaling it may also fail on its update counts).

A run agrees only where both checked the same thing in full: the script ran every microbatch
without an error, each checkpointed microbatch recomputed every layer, the report is that run's
(its command ends with the script's arguments), judged (outcome PASS or VIOLATIONS, no damage),
with a verdict per microbatch; a run marked `fix` (SCRIPT=REPORT=fix: under `fp8audit run
--fix-te`) must have had the fix in force, unless --fix-may-refuse (TE's CPU stand-in, no release
the fix patches). Exit 0 every run agrees, 1 one does not, 2 bad input (one line).

    recipes_compare.py [--fix-may-refuse] SCRIPT.json=REPORT.json[=fix] [...]

SCRIPT.json: recipes_live.py's output line under `fp8audit run --max-rows 0`; REPORT.json: `fp8audit
report DIR --format json` of that run. Where the script compared its gradients with its twin's
(--twin-grads), a column says whether they are equal (and the largest relative difference): the
twin is the numerics a recompute that reproduces its forward gives; it does not decide "agree"."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

from live_tables import collapse, fail

Row = Tuple[int, int, int]  # recomputes, changes, kwargs-only changes
JUDGED = ("OUTCOME_PASS", "OUTCOME_VIOLATIONS")


def script_rows(path: Path) -> Tuple[Dict[str, Any], List[Row]]:
    try:
        run = json.loads(path.read_text().strip().splitlines()[-1])
        rows = [(int(r["recomputes"]), int(r["changes"]), int(r.get("kwargs_changes", 0)))
                for r in run["rows"]]
        int(run["layers"]), int(run["microbatches"]), list(run["argv"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        fail(f"{path}: not recipes_live.py's output ({type(e).__name__}: {e})")
    return run, rows


def report_of(path: Path) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the report, its only rank)."""
    try:
        report = json.loads(path.read_text())
        (rank,) = report["ranks"]
        if not isinstance(rank, dict) or not isinstance(rank.get("microbatches", []), list):
            raise TypeError("a rank is not an object with microbatches")
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: not a single-rank `fp8audit report --format json` ({e})")
    if any("through_index" in m for m in rank.get("microbatches", [])):
        fail(f"{path}: folded rows (run under `fp8audit run --max-rows 0`)")
    return report, rank


def cell(rows: List[Row]) -> str:
    return collapse([f"{r[0]}, {r[1]}, {r[2]}" for r in rows], "; ")


def problems(run: Dict[str, Any], truth: List[Row], report: Dict[str, Any],
             rank: Dict[str, Any], fix: bool, fix_may_refuse: bool) -> List[str]:
    """Why the run and its report did not both check the same thing in full; [] where they did."""
    out = []
    if run.get("error") or any(r.get("failed") for r in run["rows"]):
        out.append(f"the script raised: {run.get('error') or 'a failed microbatch'}")
    if len(truth) != int(run["microbatches"]):
        out.append(f"{len(truth)} of {run['microbatches']} microbatches ran")
    if not run.get("no_checkpoint") and any(t[0] != int(run["layers"]) for t in truth):
        out.append(f"a microbatch recomputed other than its {run['layers']} layers")
    command = [str(c) for c in rank.get("header", {}).get("command", [])]
    argv = [str(a) for a in run["argv"]]
    if not argv or command[-len(argv):] != argv:
        out.append("the report is another run's (its command does not end with the script's "
                   "arguments)")
    outcomes = (report.get("outcome"), rank.get("outcome"))
    if any(o not in JUDGED for o in outcomes) or rank.get("damage"):
        out.append(f"the audit did not judge it ({', '.join(str(o) for o in outcomes)})")
    patched = bool(rank.get("recording", {}).get("te_patched", False))
    if fix and not patched and not fix_may_refuse:
        out.append("run under --fix-te, but the fix was not in force")
    return out


def twin_cell(twin: Any) -> str:
    """= twin: "yes" (bitwise), "no (R)" with the largest relative difference, "-" not compared."""
    if not isinstance(twin, dict):
        return "-"
    if twin.get("error"):
        return f"not compared ({twin['error']})"
    if twin.get("equal"):
        return "yes"
    return f"no ({float(twin.get('max_relative_difference') or 0):.3g})"


def compare(pair: str, fix_may_refuse: bool) -> bool:
    parts = pair.split("=")
    if len(parts) not in (2, 3) or not all(parts) or (len(parts) == 3 and parts[2] != "fix"):
        fail(f"{pair}: not SCRIPT.json=REPORT.json[=fix]")
    script, report_path, fix = parts[0], parts[1], len(parts) == 3
    run, truth = script_rows(Path(script))
    report, rank = report_of(Path(report_path))
    mbs = rank.get("microbatches", [])
    seen = [(int(m.get("recomputes", 0)), int(m.get("recompute_precision_changes", 0)),
             int(m.get("recompute_kwargs_changes", 0))) for m in mbs]
    verdicts = [str(m.get("verdict", "")) for m in mbs]
    delayed = "delayed" in (run.get("recipe"), run.get("backward_recipe"))
    verdicts_ok = len(verdicts) == len(truth) and all(
        v in ("PASS", "FAIL") and (v == "FAIL" if t[1] > 0 else delayed or v == "PASS")
        for t, v in zip(truth, verdicts))
    why = problems(run, truth, report, rank, fix, fix_may_refuse)
    agree = bool(truth) and truth == seen and verdicts_ok and not why
    patched = bool(rank.get("recording", {}).get("te_patched", False))
    args = " ".join(f"{k}={run[k]}" for k in ("recipe", "checkpoint", "kwargs", "flip")
                    if run.get(k) not in (None, False))
    if run.get("no_checkpoint"):
        args += " no-checkpoint"
    if fix:
        args += " --fix-te" + ("" if patched else " (refused)")
    print(f"| {Path(script).stem}: {args} | {cell(truth)} | {cell(seen)} | "
          f"{' '.join(sorted(set(verdicts))) or '-'} | {twin_cell(run.get('twin'))} | "
          f"{'; '.join(why) or '-'} | {'yes' if agree else 'NO'} |")
    return agree


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pairs", nargs="+", metavar="SCRIPT.json=REPORT.json[=fix]")
    p.add_argument("--fix-may-refuse", action="store_true",
                   help="a --fix-te run may run unpatched (TE's CPU stand-in)")
    args = p.parse_args()
    print("| run | script: recomputes, changes, kwargs (per microbatch) | agent | verdicts | "
          "= twin | not checked | agree |")
    print("|---|---|---|---|---|---|---|")
    results = [compare(pair, args.fix_may_refuse) for pair in args.pairs]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
