#!/usr/bin/env python3
"""The agent in an unmodified python3 + PyTorch job.

Runs a small model with torch.utils.checkpoint (reentrant and non-reentrant) twice per mode: once
under the agent (LD_PRELOAD, CUDA_INJECTION64_PATH and NVTX_INJECTION64_PATH, as `fp8audit run`
sets them) and once without it under torch.profiler. The agent's kernel-launch count between two
`fp8audit.step` marks must equal the number of kernels torch.profiler records over the same steps.

usage: torch_launch_count.py --agent PATH/libfp8audit.so     (exit 77: no torch or no GPU)
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

STEPS = 3
# fp8audit.v1 enum values (proto/fp8audit/trace.proto).
MICROBATCH_BEGIN, STEP, BACKWARD_BEGIN, BACKWARD_END = 11, 13, 15, 16
UPDATE_KINDS = (7, 8, 14)


# ---- A minimal reader of length-delimited TraceRecord messages (no protobuf package needed) ----
def _varint(b, i):
    shift = value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(b):
    i, out = 0, {}
    while i < len(b):
        key, i = _varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            value, i = b[i:i + n], i + n
        elif wire == 1:
            value, i = b[i:i + 8], i + 8
        elif wire == 5:
            value, i = b[i:i + 4], i + 4
        else:
            raise ValueError("bad wire type")
        out.setdefault(field, []).append(value)
    return out


def read_trace(path):
    data = open(path, "rb").read()
    header, events, footer, i = None, [], None, 0
    while i < len(data):  # a trace cut short ends at its last whole record
        try:
            n, j = _varint(data, i)
        except IndexError:
            break
        if j + n > len(data):
            break
        record = _fields(data[j:j + n])
        i = j + n
        if 1 in record:
            header = _fields(record[1][0])
        if 2 in record:
            f = _fields(record[2][0])
            events.append({"kind": f.get(1, [0])[0], "launches": f.get(16, [0])[0],
                           "thread": f.get(3, [0])[0], "pass": f.get(6, [0])[0]})
        if 3 in record:
            footer = _fields(record[3][0])
    return header, events, footer


# ---- The workload (run in child processes) ------------------------------------------------------
def worker(mode, profile, trace_json):
    import torch
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    layers = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.LayerNorm(512))
        for _ in range(6)).cuda()
    opt = torch.optim.AdamW(layers.parameters(), lr=1e-3)
    x = torch.randn(128, 512, device="cuda", requires_grad=True)
    reentrant = mode == "reentrant"

    def microbatch():
        torch.cuda.nvtx.range_push("fp8audit.microbatch")
        h = x
        for i in range(0, len(layers), 2):
            h = checkpoint(lambda t, i=i: layers[i + 1](layers[i](t)), h, use_reentrant=reentrant)
        h.float().square().mean().backward()
        torch.cuda.nvtx.range_pop()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):  # warm-up outside the measured steps (handles, allocator, lazy init)
        microbatch()
    torch.cuda.synchronize()
    prof = None
    if profile:
        from torch.profiler import ProfilerActivity, profile as torch_profile
        prof = torch_profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
    torch.cuda.nvtx.mark("fp8audit.step")
    for _ in range(STEPS):
        microbatch()
    torch.cuda.synchronize()
    torch.cuda.nvtx.mark("fp8audit.step")
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(trace_json)
        with open(trace_json) as f:
            events = json.load(f)["traceEvents"]
        kernels = sum(1 for e in events if e.get("cat") == "kernel")
        print(json.dumps({"profiler_kernels": kernels}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent")
    parser.add_argument("--worker", choices=["reentrant", "non_reentrant"])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--trace-json")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.profile, args.trace_json)
        return 0

    try:
        import torch
        if not torch.cuda.is_available():
            print("SKIP: no GPU")
            return 77
    except ImportError:
        print("SKIP: no torch")
        return 77
    agent = os.path.abspath(args.agent)
    failures = 0
    for mode in ("reentrant", "non_reentrant"):
        with tempfile.TemporaryDirectory() as tmp:
            base = {k: v for k, v in os.environ.items()
                    if not k.startswith("FP8AUDIT_") and k not in
                    ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")}
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode]
            # Without the agent, under torch.profiler.
            prof = subprocess.run(cmd + ["--profile", "--trace-json", os.path.join(tmp, "p.json")],
                                  env=base, capture_output=True, text=True, timeout=300)
            if prof.returncode != 0:
                print(prof.stdout, prof.stderr)
                return 1
            profiler_kernels = json.loads(prof.stdout.strip().splitlines()[-1])["profiler_kernels"]
            # Under the agent, as `fp8audit run` starts it.
            env = dict(base, LD_PRELOAD=agent, CUDA_INJECTION64_PATH=agent,
                       NVTX_INJECTION64_PATH=agent, FP8AUDIT_OUT=os.path.join(tmp, "traces"))
            run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            traces = glob.glob(os.path.join(tmp, "traces", "*.fp8trace"))
            if run.returncode != 0 or len(traces) != 1:
                print("agent run failed:", run.returncode, traces, run.stdout, run.stderr)
                return 1
            header, events, footer = read_trace(traces[0])
            steps = [e for e in events if e["kind"] == STEP]
            agent_launches = steps[-1]["launches"] - steps[0]["launches"] if len(steps) == 2 else -1
            first, last = events.index(steps[0]), events.index(steps[-1])
            region = events[first:last]
            backward_begins = sum(1 for e in region if e["kind"] == BACKWARD_BEGIN)
            microbatches = sum(1 for e in region if e["kind"] == MICROBATCH_BEGIN)
            updates = sum(1 for e in events if e["kind"] in UPDATE_KINDS)
            gpu = header.get(7, [b""])[0].decode()
            total = footer.get(4, [0])[0] if footer else -1
            ok = (agent_launches == profiler_kernels and agent_launches > 0 and
                  backward_begins == STEPS and microbatches == STEPS and updates == 0)
            failures += 0 if ok else 1
            print(f"{mode:14s} agent launches {agent_launches:6d}  torch.profiler kernels "
                  f"{profiler_kernels:6d}  backward passes {backward_begins}  microbatches "
                  f"{microbatches}  process total {total}  gpu '{gpu}'  stderr "
                  f"{run.stderr.strip()!r}  {'OK' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
