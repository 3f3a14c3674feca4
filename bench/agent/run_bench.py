#!/usr/bin/env python3
"""Agent overhead, side by side in one run (alternating rounds with and without the agent):

1. host time per empty-kernel launch (agent_launch_overhead): median of per-round medians;
2. PyTorch training-step time (torch_step_bench.py), a GPU-bound and a launch-bound model, each
   with >= 1,000 kernel launches per step (counted by the agent).

usage: run_bench.py --agent lib/libfp8audit.so --launch-bench bin/agent_launch_overhead [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def agent_env(agent, out):
    return dict(os.environ, LD_PRELOAD=agent, CUDA_INJECTION64_PATH=agent,
                NVTX_INJECTION64_PATH=agent, FP8AUDIT_OUT=out)


def run_json(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{cmd} failed ({p.returncode}): {p.stdout} {p.stderr}")
    if p.stderr.strip():
        print("  stderr:", p.stderr.strip())
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--launch-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--torch-rounds", type=int, default=2)
    args = ap.parse_args()
    agent = os.path.abspath(args.agent)
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")}
    os.environ.clear()
    os.environ.update(base)
    tmp = tempfile.mkdtemp()
    rows = []
    if args.launch_bench:
        off, on = [], []
        for r in range(args.rounds):
            off.append(run_json([args.launch_bench], dict(os.environ))["median_ns"])
            on.append(run_json([args.launch_bench], agent_env(agent, tmp))["median_ns"])
            print(f"launch round {r}: without {off[-1]:.0f} ns, with {on[-1]:.0f} ns")
        m_off, m_on = statistics.median(off), statistics.median(on)
        deltas = sorted(b - a for a, b in zip(off, on))
        rows.append(("host time per empty-kernel launch (median of round medians)",
                     f"{m_off / 1000:.2f} us", f"{m_on / 1000:.2f} us",
                     f"+{(m_on - m_off) / 1000:.2f} us (paired deltas {', '.join(f'{d/1000:+.2f}' for d in deltas)})"))
    for config in ("gpu_bound", "launch_bound"):
        off, on, launches = [], [], []
        for r in range(args.torch_rounds):
            cmd = [sys.executable, os.path.join(HERE, "torch_step_bench.py"), "--config", config]
            off.append(run_json(cmd, dict(os.environ))["median_step_ms"])
            res = run_json(cmd + ["--count-from", tmp], agent_env(agent, tmp))
            on.append(res["median_step_ms"])
            launches.append(res.get("launches_per_step", -1))
            print(f"{config} round {r}: without {off[-1]:.3f} ms, with {on[-1]:.3f} ms, "
                  f"{launches[-1]} launches/step")
        m_off, m_on = statistics.median(off), statistics.median(on)
        rows.append((f"PyTorch step, {config} ({min(launches)} launches/step)",
                     f"{m_off:.3f} ms", f"{m_on:.3f} ms", f"x{m_on / m_off:.4f}"))
    print("\n| measure | without agent | with agent | overhead |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
