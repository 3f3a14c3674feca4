#!/usr/bin/env python3
"""Builds the live-TE agreement table from one run_live.sh results directory.

For every layout and backward placement it puts side by side: TE's own counter (run without the
agent), the agent's counts with NVTX microbatch markers and without any marker, and the
ownership model's te-legacy prediction (`fp8audit model`). Prints a markdown table; exits 1 when
any cell of a row disagrees, 2 on missing or malformed input.
"""
import argparse
import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_tables import fail, report_counts, split_like  # noqa: E402

# layout -> (layers, linears per layer, checkpoint, segments) for `fp8audit model --layers`
MODEL_LAYOUTS = {
    "none": (3, 1, "none", "single"),
    "non-reentrant-single": (3, 1, "non-reentrant", "single"),
    "non-reentrant-per-layer": (3, 1, "non-reentrant", "per-layer"),
    "reentrant-single-1": (1, 1, "reentrant", "single"),
    "reentrant-single-3": (3, 1, "reentrant", "single"),
    "reentrant-per-layer": (3, 1, "reentrant", "per-layer"),
    "nested": (3, 1, "reentrant", "nested"),
    "decoder-28x7": (28, 7, "reentrant", "per-layer"),
}

# backward placement -> (TE counter alone, agent with markers, agent without markers)
RUNS = {
    "after": ("plain", "markers", "nomarkers"),
    "inside": ("inside_plain", "inside", None),
}


def te_counts(path):
    """layout -> list of (forward, backward), in microbatch order."""
    out = OrderedDict()
    try:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "microbatch" in row:
                out.setdefault(row["layout"], []).append((row["forward"], row["backward"]))
    except (OSError, ValueError, KeyError) as e:
        fail(f"{path}: {e}")
    return out


def model_counts(fp8audit, layout, backward):
    layers, per_layer, checkpoint, segments = MODEL_LAYOUTS[layout]
    cmd = [fp8audit, "model", "--semantics", "te-legacy", "--layers", str(layers),
           "--linears-per-layer", str(per_layer), "--checkpoint", checkpoint, "--segments",
           segments, "--backward", backward, "--microbatches", "2", "--format", "json"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return sorted({(m.get("forward_updates", 0), m.get("backward_updates", 0))
                   for m in result["microbatches"]})


def cell(values):
    distinct = sorted(set(values))
    return " ".join(f"{f}/{b}" for f, b in distinct) if distinct else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="directory written by run_live.sh")
    p.add_argument("--fp8audit", default="fp8audit", help="the fp8audit executable")
    args = p.parse_args()
    print("| backward | layout | TE counter | agent (markers) | agent (no markers) "
          "| model te-legacy | agree |")
    print("|---|---|---|---|---|---|---|")
    disagreements = 0
    for backward, (plain, markers, nomarkers) in RUNS.items():
        reference = te_counts(args.results / f"{plain}.jsonl")
        same_run = te_counts(args.results / f"{markers}.jsonl")
        with_markers = split_like(reference, report_counts(args.results / f"{markers}.json"),
                                  args.results / f"{markers}.json")
        without = (split_like(reference, report_counts(args.results / f"{nomarkers}.json"),
                              args.results / f"{nomarkers}.json") if nomarkers else None)
        for layout, counts in reference.items():
            cells = [cell(counts), cell(with_markers[layout]),
                     cell(without[layout]) if without else "not run",
                     cell(model_counts(args.fp8audit, layout, backward))]
            compared = [c for c in cells if c != "not run"] + [cell(same_run.get(layout, []))]
            agree = len(set(compared)) == 1 and " " not in compared[0]
            disagreements += not agree
            print(f"| {backward} | {layout} | " + " | ".join(cells) +
                  f" | {'yes' if agree else 'NO'} |")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
