#!/usr/bin/env python3
"""Agent overhead, side by side in one run (alternating rounds with and without the agent):

1. host time per empty-kernel launch (agent_launch_overhead): median of per-round medians, without
   any tool, with a CUPTI subscriber that only counts launches (CUPTI's own cost), with the agent;
2. PyTorch training-step time (torch_step_bench.py), a GPU-bound and a launch-bound model, each
   with >= 1,000 kernel launches per step (counted by the agent): without any tool, with the
   counting-only CUPTI subscriber (when given) and with the agent, the order alternating by round.

usage: run_bench.py --agent lib/libfp8audit.so --launch-bench bin/agent_launch_overhead
                    [--null-subscriber lib/libagent_null_subscriber.so] [--rounds 7]
Every process is pinned to the same CPUs (taskset) to cut run-to-run noise.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def agent_env(agent, out):
    return dict(os.environ, LD_PRELOAD=agent, CUDA_INJECTION64_PATH=agent,
                NVTX_INJECTION64_PATH=agent, FP8AUDIT_OUT=out)


PIN = []


def run_json(cmd, env):
    p = subprocess.run(PIN + cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{cmd} failed ({p.returncode}): {p.stdout} {p.stderr}")
    if p.stderr.strip():
        print("  stderr:", p.stderr.strip())
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--launch-bench")
    ap.add_argument("--null-subscriber")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--torch-rounds", type=int, default=4)
    ap.add_argument("--cpus", default="2-5")
    args = ap.parse_args()
    if shutil.which("taskset") and args.cpus:
        PIN.extend(["taskset", "-c", args.cpus])
    agent = os.path.abspath(args.agent)
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")}
    os.environ.clear()
    os.environ.update(base)
    tmp = tempfile.mkdtemp()
    rows = []
    if args.launch_bench:
        cpu = args.cpus.split("-")[0].split(",")[0] if args.cpus else ""
        pin_one = ["taskset", "-c", cpu] if PIN and cpu else []
        off, null, on = [], [], []
        for r in range(args.rounds):
            cmd = pin_one + [args.launch_bench]
            off.append(run_json(cmd, dict(os.environ))["median_ns"])
            if args.null_subscriber:
                env = dict(os.environ, CUDA_INJECTION64_PATH=os.path.abspath(args.null_subscriber))
                null.append(run_json(cmd, env)["median_ns"])
            on.append(run_json(cmd, agent_env(agent, tmp))["median_ns"])
            print(f"launch round {r}: without {off[-1]:.0f} ns, "
                  + (f"CUPTI counting only {null[-1]:.0f} ns, " if null else "")
                  + f"with the agent {on[-1]:.0f} ns")
        m_off, m_on = statistics.median(off), statistics.median(on)
        paired = [b - a for a, b in zip(off, on)]
        rows.append(("host time per empty-kernel launch (median of round medians)",
                     f"{m_off / 1000:.2f} us", f"{m_on / 1000:.2f} us",
                     f"+{(m_on - m_off) / 1000:.2f} us (median paired delta "
                     f"{statistics.median(paired) / 1000:+.2f} us)"))
        if null:
            m_null = statistics.median(null)
            rows.append(("same, CUPTI subscriber that only counts (CUPTI's own cost)",
                         f"{m_off / 1000:.2f} us", f"{m_null / 1000:.2f} us",
                         f"+{(m_null - m_off) / 1000:.2f} us; agent beyond it "
                         f"{(m_on - m_null) / 1000:+.2f} us"))
    for config in ("gpu_bound", "launch_bound"):
        off, null, on, launches = [], [], [], []
        for r in range(args.torch_rounds):
            cmd = [sys.executable, os.path.join(HERE, "torch_step_bench.py"), "--config", config,
                   "--steps", "30" if config == "gpu_bound" else "100"]
            variants = [("off", None), ("on", agent_env(agent, tmp))]
            if args.null_subscriber:
                variants.insert(1, ("null", dict(os.environ, CUDA_INJECTION64_PATH=os.path.abspath(
                    args.null_subscriber))))
            if r % 2:  # alternate the order, so drift within a round does not favour one side
                variants.reverse()
            for name, env in variants:
                if name == "off":
                    off.append(run_json(cmd, dict(os.environ))["median_step_ms"])
                elif name == "null":
                    null.append(run_json(cmd, env)["median_step_ms"])
                else:
                    res = run_json(cmd + ["--count-from", tmp], env)
                    on.append(res["median_step_ms"])
                    launches.append(res.get("launches_per_step", -1))
            print(f"{config} round {r}: without {off[-1]:.3f} ms, "
                  + (f"CUPTI counting only {null[-1]:.3f} ms, " if null else "")
                  + f"with the agent {on[-1]:.3f} ms, {launches[-1]} launches/step")
        m_off, m_on = statistics.median(off), statistics.median(on)
        paired = statistics.median([b / a for a, b in zip(off, on)])
        rows.append((f"PyTorch step, {config} ({min(launches)} launches/step)",
                     f"{m_off:.3f} ms", f"{m_on:.3f} ms",
                     f"x{m_on / m_off:.4f} (median paired ratio x{paired:.4f})"))
        if null:
            m_null = statistics.median(null)
            rows.append((f"same, CUPTI subscriber that only counts", f"{m_off:.3f} ms",
                         f"{m_null:.3f} ms", f"x{m_null / m_off:.4f}; agent beyond it "
                         f"x{m_on / m_null:.4f}"))
    print("\n| measure | without agent | with agent | overhead |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
