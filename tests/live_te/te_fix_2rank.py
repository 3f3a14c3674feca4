#!/usr/bin/env python3
"""What the duplicated updates cost in a distributed job (issue 14): the 28 x 7 decoder with
reentrant per-layer checkpointing on every rank of a torchrun job, TE's amax reduction over the
world group (DelayedScaling's reduce_amax, TE's default), unpatched and patched by fp8audit.te
alternating in one process per rank. Per mode: TE's DelayedScaling updates and amax all-reduces
per microbatch (torch.distributed.all_reduce calls made inside reduce_and_update_fp8_tensors, and
the bytes they reduce), and the median forward + backward time per microbatch (each run's first
microbatch, a warm-up, left out). Rank 0 prints one JSON line.

  torchrun --standalone --nproc_per_node 2 tests/live_te/te_fix_2rank.py > out/2rank.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import te_fix  # noqa: E402  (puts python/ on the path too)


class AllReduces:
    """Counts torch.distributed.all_reduce calls and their bytes (TE looks the function up on
    the module at each call, so replacing the attribute sees every one)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.original = dist.all_reduce
        self.calls = 0
        self.bytes = 0
        seen = self

        def counting(tensor, *args, **kwargs):
            seen.calls += 1
            seen.bytes += tensor.numel() * tensor.element_size()
            return seen.original(tensor, *args, **kwargs)

        dist.all_reduce = counting

    def take(self) -> tuple:
        out = (self.calls, self.bytes)
        self.calls = self.bytes = 0
        return out


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=6, help="per run (the first is a warm-up)")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    from te_layouts import LAYOUTS

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    te_pkg, te, recipe_mod, manager = te_fix.import_te(False)
    layout = LAYOUTS["decoder-28x7"]
    reduces = AllReduces()
    per_mode: Dict[str, Dict[str, List[Any]]] = {
        m: {"ms": [], "updates": [], "all_reduces": [], "bytes": []}
        for m in ("unpatched", "patched")}
    for _ in range(args.rounds):
        for mode in ("unpatched", "patched"):
            dist.barrier()
            reduces.take()
            with te_fix.counted(manager, mode, False) as counter:
                records = te_fix.run_layout(
                    te, recipe_mod, counter, layout, checkpointing=True, hidden=args.hidden,
                    tokens=args.tokens, device="cuda", microbatches=args.microbatches, steps=1,
                    backward_inside=False, seed=args.seed + rank, keep_tensors=False)
            calls, nbytes = reduces.take()
            m = per_mode[mode]
            m["ms"] += [r["seconds"] * 1e3 for r in records[1:] or records]
            m["updates"].append([(r["forward"], r["backward"]) for r in records])
            m["all_reduces"].append(calls / len(records))
            m["bytes"].append(nbytes / len(records))
    # every rank's medians, so a slow rank shows
    mine = {mode: statistics.median(m["ms"]) for mode, m in per_mode.items()}
    gathered: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        out: Dict[str, Any] = {
            "kind": "distributed_timing", "layout": layout.name, "world_size": len(gathered),
            "hidden": args.hidden, "tokens": args.tokens, "rounds": args.rounds,
            "microbatches": args.microbatches, "te_version": te_pkg.__version__,
            "gpu": torch.cuda.get_device_name(), "median_ms_per_rank": gathered}
        for mode, m in per_mode.items():
            out[mode] = {"updates_first_run": m["updates"][0],
                         "all_reduces_per_microbatch": statistics.median(m["all_reduces"]),
                         "all_reduce_bytes_per_microbatch": statistics.median(m["bytes"]),
                         "median_ms": statistics.median(m["ms"]), "ms": m["ms"]}
        out["ratio_patched_over_unpatched"] = (out["patched"]["median_ms"]
                                               / out["unpatched"]["median_ms"])
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
