#!/usr/bin/env python3
"""A 1F1B pipeline schedule on one process with real TE (or its CPU stand-in, --standin): TE's
update counts per logical microbatch, and bitwise equality with the same schedule without
checkpointing; one JSON line per microbatch and per run on stdout.

Each step runs N microbatches: WARMUP forwards, then one backward and one forward alternately
(steady state: the forward of i+WARMUP before the backward of i+1), then the remaining backwards.
The model is te.Linear, te.LayerNormMLP, te.Linear in te.autocast with DelayedScaling (HYBRID),
each layer in TE's checkpoint (te.checkpoint, reentrant unless --non-reentrant); the twin runs the
same schedule without checkpointing. Each pass runs in `fp8audit.microbatch(id=ID)` (ID new for
every microbatch of the process), so under `fp8audit run` the agent's row of each id can be
compared with TE's counter (--compare). Modes: unpatched, and patched with
fp8audit.te.patch(verify=True).

  python3 tests/live_te/interleaved_live.py > OUT/interleaved.jsonl            # GPU, TE 2.20.2
  fp8audit run --out OUT/il -- python3 tests/live_te/interleaved_live.py > OUT/interleaved.jsonl
  fp8audit report OUT/il --format json -o OUT/il.json
  python3 tests/live_te/interleaved_live.py --compare OUT/interleaved.jsonl OUT/il.json

Per microbatch: id, step, TE's forward and backward update counts (a pass's updates belong to
the microbatch of that pass: recompute's to the backward's), the FP8 state after its backward,
its loss and input gradient against the twin's. Per run: gradients at each step's end and the
recompute stash left. --compare exits 1 where the agent's counts of an id differ from TE's or a
patched microbatch is not 1/1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "python")]

import te_fix  # noqa: E402  (import_te, reset_te, counted, stash_entries, _equal)


def schedule(n: int, warmup: int) -> List[Tuple[int, bool]]:
    """(microbatch, forward?) in 1F1B order."""
    warmup = min(warmup, n)
    order = [(i, True) for i in range(warmup)]
    for i in range(n - warmup):
        order += [(i, False), (i + warmup, True)]
    return order + [(i, False) for i in range(n - warmup, n)]


def run(te: Any, recipe_mod: Any, counter: Any, args: Any, *, checkpointing: bool,
        first_id: int) -> Dict[str, Any]:
    import torch
    import fp8audit
    from te_layouts import fp8_state, seeded

    te_fix.reset_te(te)
    with seeded(args.seed):
        h = args.hidden
        layers = [m.to(args.device) for m in (te.Linear(h, h), te.LayerNormMLP(h, 2 * h),
                                              te.Linear(h, h))]
    params = [p for layer in layers for p in layer.parameters()]
    optimizer = torch.optim.SGD(params, lr=1e-2)
    recipe = recipe_mod.DelayedScaling(fp8_format=recipe_mod.Format.HYBRID)
    gen = torch.Generator().manual_seed(args.seed + 1)
    reentrant = not args.non_reentrant
    rows: List[Dict[str, Any]] = []
    grads = []
    for step in range(args.steps):
        live: Dict[int, Dict[str, Any]] = {}
        for mb, forward in schedule(args.microbatches, args.warmup):
            key = first_id + step * args.microbatches + mb
            counter.take()
            with fp8audit.microbatch(id=key):
                if forward:
                    x = torch.randn((args.tokens // 2, 2, h), generator=gen).to(args.device)
                    x.requires_grad_()
                    y = x
                    with te.autocast(enabled=True, recipe=recipe):
                        for layer in layers:
                            y = (te.checkpoint(layer, y, use_reentrant=reentrant)
                                 if checkpointing else layer(y))
                    live[mb] = {"id": key, "step": step, "x": x, "loss": y.float().pow(2).mean()}
                else:
                    live[mb]["loss"].backward()
            f, b = counter.take()
            row = live[mb]
            row["forward"] = row.get("forward", 0) + f
            row["backward"] = row.get("backward", 0) + b
            if not forward:
                row = live.pop(mb)
                rows.append({"id": row["id"], "step": step, "forward": row["forward"],
                             "backward": row["backward"], "state": fp8_state(layers),
                             "loss": row["loss"].detach().clone(), "x_grad": row["x"].grad.clone()})
        grads.append([None if p.grad is None else p.grad.clone() for p in params])
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    return {"rows": rows, "grads": grads, "stash_left": te_fix.stash_entries(counter.manager)}


def lines(args: Any, te_pkg: Any, te: Any, recipe_mod: Any, manager: Any, mode: str,
          first_id: int) -> List[Dict[str, Any]]:
    import fp8audit.te
    from te_layouts import first_difference

    with te_fix.counted(manager, mode, verify=True) as counter:
        patched = fp8audit.te.is_patched()
        ckpt = run(te, recipe_mod, counter, args, checkpointing=True, first_id=first_id)
        twin = run(te, recipe_mod, counter, args, checkpointing=False, first_id=first_id + 10**6)
    out = []
    for r, t in zip(ckpt["rows"], twin["rows"]):
        out.append({"kind": "microbatch", "mode": mode, "id": r["id"], "step": r["step"],
                    "forward": r["forward"], "backward": r["backward"],
                    "twin": [t["forward"], t["backward"]],
                    "state_equal": first_difference(r["state"], t["state"]) is None,
                    "loss_equal": te_fix._equal(r["loss"], t["loss"]),
                    "x_grad_equal": te_fix._equal(r["x_grad"], t["x_grad"])})
    out.append({"kind": "run", "mode": mode, "patched": patched,
                "te_version": te_pkg.__version__, "microbatches": len(ckpt["rows"]),
                "warmup": args.warmup, "checkpoint": "non-reentrant" if args.non_reentrant
                else "reentrant", "stash_left": ckpt["stash_left"],
                "state_equal": all(line["state_equal"] for line in out),
                "grads_equal": te_fix._equal(ckpt["grads"], twin["grads"])})
    return out


def compare(jsonl: Path, report: Path) -> int:
    """TE's counter against the agent's row of each id; patched microbatches must be 1/1."""
    te_rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    rep = json.loads(report.read_text())
    agent: Dict[int, Tuple[int, int]] = {}
    for rank in rep["ranks"]:
        for m in rank.get("microbatches", []):
            if "microbatch_id" in m:
                agent[int(m["microbatch_id"])] = (m.get("forward_updates", 0),
                                                  m.get("backward_updates", 0))
    bad = 0
    for row in te_rows:
        if row["kind"] != "microbatch":
            continue
        te_counts = (row["forward"], row["backward"])
        seen = agent.get(row["id"])
        ok = seen == te_counts and (row["mode"] != "patched" or te_counts == (1, 1))
        bad += not ok
        print(f"{row['mode']:9} id {row['id']:4} TE {te_counts[0]}/{te_counts[1]} agent "
              f"{'-' if seen is None else f'{seen[0]}/{seen[1]}'} {'ok' if ok else 'DIFFERS'}")
    print(f"{bad} differ")
    return 1 if bad else 0


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--standin", action="store_true", help="the CPU stand-in of TE (tests)")
    p.add_argument("--mode", choices=["unpatched", "patched", "both"], default="both")
    p.add_argument("--microbatches", type=int, default=8, help="per optimizer step")
    p.add_argument("--warmup", type=int, default=3, help="forwards in flight")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--non-reentrant", action="store_true", help="te.checkpoint(use_reentrant=False)")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("JSONL", "REPORT_JSON"))
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    args.device = "cpu" if args.standin else "cuda"
    if args.standin:
        os.environ.setdefault("FP8AUDIT_TE_STANDIN", "1")
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    te_pkg, te, recipe_mod, manager = te_fix.import_te(args.standin)
    modes = ["unpatched", "patched"] if args.mode == "both" else [args.mode]
    for n, mode in enumerate(modes):
        for line in lines(args, te_pkg, te, recipe_mod, manager, mode, first_id=n * 10**5):
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
