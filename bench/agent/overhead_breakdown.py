#!/usr/bin/env python3
"""The agent's overhead measured inside one process, where run-to-run noise between processes
(10-30% for a launch-bound PyTorch step on a shared host) cannot hide it.

Both tools export fp8audit_set_launch_probe, so the benchmark alternates probe on / probe off
between batches (empty-kernel launches) or training steps (PyTorch) in one process:
  cupti          a CUPTI subscriber that only counts launches (CUPTI's own cost; null_subscriber)
  cupti-agent    the same subscriber with the agent's whole callback set, all of it toggled
  agent          the agent through all three routes, as `fp8audit run` loads it (probe auto: no
                 TE in these jobs, so CUPTI launch callbacks)
  agent-te       the same with FP8AUDIT_PROBE=te-call: TE's update calls only, no CUPTI; the toggle
                 turns the te-call probe's recording on and off (nothing is on the launch path)
  agent-profile  the agent with FP8AUDIT_SELF_PROFILE=1: time spent in its own handlers
  off            no tool (for the side-by-side comparison across processes)
Rounds rotate the order of the set-ups.

usage: overhead_breakdown.py --agent lib/libfp8audit.so --null-subscriber
           lib/libagent_null_subscriber.so [--launch-bench bin/agent_launch_overhead]
           [--configs launch_bound,gpu_bound] [--rounds 5]
           [--te-call-bench bin/agent_te_call_bench --te-lib tests/agent/fake_te/libtransformer_engine.so]
           [--setups off,agent,agent-te]
--setups: which of the set-ups above to run (default: all; `off` is always run).
--te-call-bench: the te-call probe's added time per TE update call (through the agent vs TE's
own function, alternating batches in one process; CPU only).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL_VARS = ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "FP8AUDIT_SELF_PROFILE",
             "FP8AUDIT_NULL_SET", "FP8AUDIT_PROBE")
PIN = []


def setups(agent, null, out):
    base = {k: v for k, v in os.environ.items() if k not in TOOL_VARS}
    full = dict(base, LD_PRELOAD=agent, CUDA_INJECTION64_PATH=agent, NVTX_INJECTION64_PATH=agent,
                FP8AUDIT_OUT=out)
    return [("off", base, False), ("cupti", dict(base, CUDA_INJECTION64_PATH=null), True),
            ("cupti-agent", dict(base, CUDA_INJECTION64_PATH=null, FP8AUDIT_NULL_SET="agent"), True),
            ("agent", full, True), ("agent-te", dict(full, FP8AUDIT_PROBE="te-call"), True),
            ("agent-profile", dict(full, FP8AUDIT_SELF_PROFILE="1"), False)]


def run(name, cmd, env, profiles):
    p = subprocess.run(PIN + cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{name}: {' '.join(cmd)} failed ({p.returncode}): {p.stdout} {p.stderr}")
    for line in p.stderr.splitlines():
        if "self-profile" in line:
            profiles.append(line.strip())
        elif line.strip():
            print(f"  {name} stderr: {line.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def series(title, make_cmd, keys, variants, rounds):
    """keys: (plain value, probe-on value, probe-off value, paired ratio or None)."""
    plain, on, off, pairs, profiles = {}, {}, {}, {}, []
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for name, env, toggle in order:
            res = run(name, make_cmd(toggle), env, profiles)
            plain.setdefault(name, []).append(res[keys[0]])
            if toggle:
                on.setdefault(name, []).append(res[keys[1]])
                off.setdefault(name, []).append(res[keys[2]])
                if keys[3]:
                    pairs.setdefault(name, []).append(res[keys[3]])
        print(f"{title} round {r}: " + ", ".join(f"{n} {plain[n][-1]:.4g}" for n in plain),
              flush=True)
    med = statistics.median
    print(f"\n{title}: in one process, probe on vs off (median over rounds)")
    print("| tool | probe on | probe off | on/off |\n|---|---|---|---|")
    for name in on:
        ratio = med(pairs[name]) if name in pairs else med(
            [a / b for a, b in zip(on[name], off[name])])
        print(f"| {name} | {med(on[name]):.4g} | {med(off[name]):.4g} | x{ratio:.4f} |")
    print(f"{title}: across processes (median; noisy)")
    print("| set-up | median | ratio to off |\n|---|---|---|")
    for name in plain:
        print(f"| {name} | {med(plain[name]):.4g} | x{med(plain[name]) / med(plain['off']):.4f} |")
    for line in profiles[-2:]:
        print(f"{title}, {line}")
    print(flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--null-subscriber", required=True)
    ap.add_argument("--launch-bench")
    ap.add_argument("--configs", default="launch_bound,gpu_bound")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", default="2-5")
    ap.add_argument("--te-call-bench")
    ap.add_argument("--te-lib")
    ap.add_argument("--setups", default="")
    args = ap.parse_args()
    if args.cpus:
        PIN.extend(["taskset", "-c", args.cpus])
    out = tempfile.mkdtemp()
    variants = setups(os.path.abspath(args.agent), os.path.abspath(args.null_subscriber), out)
    agent_env = dict(variants[3][1], FP8AUDIT_PROBE="te")
    if args.setups:
        wanted = set(args.setups.split(",")) | {"off"}
        unknown = wanted - {name for name, _, _ in variants}
        if unknown:
            sys.exit(f"--setups: unknown set-up {', '.join(sorted(unknown))}")
        variants = [v for v in variants if v[0] in wanted]
    if args.te_call_bench and args.te_lib:
        results = [run("te-call", [args.te_call_bench, args.te_lib], agent_env, [])
                   for _ in range(args.rounds)]
        med = statistics.median
        print("TE update call (8 tensors), ns: through the agent vs TE's own function, one process")
        print("| round | direct | through the agent | added | recording off, added |")
        print("|---|---|---|---|---|")
        for i, r in enumerate(results):
            print(f"| {i} | {r['direct_ns']:.1f} | {r['through_agent_ns']:.1f} | "
                  f"{r['added_ns']:.1f} | {r.get('added_recording_off_ns', float('nan')):.1f} |")
        print(f"median added: {med([r['added_ns'] for r in results]):.1f} ns\n", flush=True)
    if args.launch_bench:
        series("empty-kernel launch, ns", lambda toggle: [args.launch_bench],
               ("median_ns", "probe_on_median_ns", "probe_off_median_ns", None), variants,
               args.rounds)
    for config in filter(None, args.configs.split(",")):
        steps = "100" if config == "launch_bound" else "30"
        cmd = [sys.executable, os.path.join(HERE, "torch_step_bench.py"), "--config", config,
               "--steps", steps]
        series(f"PyTorch step {config}, ms", lambda toggle: cmd + (["--toggle"] if toggle else []),
               ("median_step_ms", "probe_on_ms", "probe_off_ms", "paired_on_off_ratio"), variants,
               args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
