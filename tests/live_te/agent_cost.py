#!/usr/bin/env python3
"""What the agent costs a Megatron-core job (issue 19 item 1): the same megatron_live.py row run
in alternating processes, plain and under `fp8audit run` (the default probes and Python hook, no
fix), in the order plain, agent, agent, plain, ... so that a drift of the machine falls on both.
Each process trains --steps steps and reports each step's time (megatron_live.py's run line); its
first step (warm-up) is left out. Prints one JSON line: per arm the step times, their median with
a distribution-free 95% interval, the per-process medians, and the ratio agent / plain of the
medians. Exit 1 when a process fails, 2 on bad input.

  agent_cost.py --fp8audit build/bin/fp8audit --pairs 5 -- --row full-uniform --layers 16 ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from live_tables import fail
from megatron_live import median_interval

HERE = Path(__file__).resolve().parent


def order(pairs: int) -> List[str]:
    """plain, agent, agent, plain, plain, agent, ...: each arm first in half the pairs."""
    out: List[str] = []
    for i in range(pairs):
        out += ["plain", "agent"] if i % 2 == 0 else ["agent", "plain"]
    return out


def step_seconds(stdout: str) -> List[float]:
    """The step times of megatron_live.py's run line, its warm-up step left out."""
    for line in stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("kind") == "run" and record.get("seconds"):
                return [float(s) for s in record["seconds"][1:]]
    return []


def summarize(per_process: Dict[str, List[List[float]]]) -> Dict[str, object]:
    out: Dict[str, object] = {}
    for arm, runs in per_process.items():
        steps = [s for run in runs for s in run]
        out[arm] = {"steps_s": steps, "median_s": statistics.median(steps),
                    "ci95_s": median_interval(steps),
                    "process_medians_s": [statistics.median(r) for r in runs]}
    out["ratio_agent_over_plain"] = (out["agent"]["median_s"] /  # type: ignore[index]
                                     out["plain"]["median_s"])  # type: ignore[index]
    return out


def measure(binary: str, pairs: int, row_args: Sequence[str],
            run: Callable[[List[str]], "subprocess.CompletedProcess[str]"]) -> Dict[str, object]:
    per_process: Dict[str, List[List[float]]] = {"plain": [], "agent": []}
    script = [sys.executable, str(HERE / "megatron_live.py"), "--mode", "hook", "--no-twin",
              *row_args]
    with tempfile.TemporaryDirectory() as tmp:
        for i, arm in enumerate(order(pairs)):
            command = script if arm == "plain" else [
                binary, "run", "--max-rows", "0", "--out", f"{tmp}/{i}", "--", *script]
            done = run(command)
            seconds = step_seconds(done.stdout)
            if arm == "plain" and done.returncode != 0 or not seconds:
                print(f"agent_cost.py: process {i} ({arm}) exit {done.returncode}, no step times: "
                      f"{done.stderr.strip().splitlines()[-1:] or ''}", file=sys.stderr)
                sys.exit(1)
            per_process[arm].append(seconds)
    return summarize(per_process)


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fp8audit", required=True, help="the fp8audit executable")
    p.add_argument("--pairs", type=int, default=5, help="plain/agent process pairs (default 5)")
    p.add_argument("row_args", nargs=argparse.REMAINDER,
                   help="-- then megatron_live.py's arguments (--row, sizes, --steps)")
    args = p.parse_args(argv)
    row_args = args.row_args[1:] if args.row_args[:1] == ["--"] else args.row_args
    if args.pairs < 1:
        fail("--pairs must be at least 1")
    if not Path(args.fp8audit).is_file():
        fail(f"{args.fp8audit}: no such executable")

    def run(command: List[str]) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(command, capture_output=True, text=True, timeout=900)

    print(json.dumps({"kind": "agent_cost", "pairs": args.pairs, "row_args": row_args,
                      **measure(args.fp8audit, args.pairs, row_args, run)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
