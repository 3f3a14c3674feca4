#!/usr/bin/env python3
"""Megatron-core as a live target (issue 19): a small GPTModel from
get_gpt_layer_with_transformer_engine_spec() trained with FP8 DelayedScaling (fp8="hybrid",
fp8_recipe="delayed"; --fp8-recipe tensorwise|blockwise for TE's current and block scaling)
through forward_backward_no_pipelining on one GPU, per recompute layout.

One JSON line per microbatch and per run on stdout. Per microbatch: TE's update counts (the
counter of te_driver.py around reduce_and_update_fp8_tensors), recompute stash entries left, the
error if the microbatch failed; on TE with PR #3456's scheduling (pr_3456/apply.py) also its state
after the microbatch: pending, depth, slot. Per run: whether every step's FP8 state (all modules'
amax histories and scales), every microbatch's loss and every step's gradients equal the same
model's without recompute (the twin: the row's config with recompute off), bitwise, and where they
first differ. --mode patched applies fp8audit.te.patch() first; --mode hook leaves patching to the
environment (`fp8audit run --fix-te` or not) and only counts: the agent's route.

  python3 tests/live_te/megatron_live.py --row full-uniform --mode both > out/mc_full.jsonl
  fp8audit run --fix-te -- python3 tests/live_te/megatron_live.py --row selective-mlp --mode hook
  python3 tests/live_te/megatron_live.py --time ...   # fix's cost: patch toggled per round
Needs TE, megatron-core (0.19.2) and torch with one GPU; torch.distributed is initialised with
world size 1 (MASTER_PORT from the environment or a free port).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import socket
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "python")]

# Rows: TransformerConfig overrides. "moe": 4 experts, top-2, grouped GEMM (TE GroupedLinear).
# "attention": Megatron's attention_backend by name (default unfused: Megatron's own core
# attention, no TE module); "auto" lets TE's DotProductAttention run it, which selective core_attn
# recompute checkpoints with Megatron's tensor_parallel.checkpoint (not TE's).
ROWS: Dict[str, Dict[str, Any]] = {
    "none": {},
    "full-uniform": dict(recompute_granularity="full", recompute_method="uniform",
                         recompute_num_layers=1),
    "full-uniform-all": dict(recompute_granularity="full", recompute_method="uniform",
                             recompute_num_layers=2),
    "full-block": dict(recompute_granularity="full", recompute_method="block",
                       recompute_num_layers=1),
    "selective-core-attn": dict(recompute_granularity="selective", recompute_modules=["core_attn"]),
    "selective-core-attn-te": dict(attention="auto", recompute_granularity="selective",
                                   recompute_modules=["core_attn"]),
    "selective-core-attn-fp8-dpa": dict(attention="auto", fp8_dot_product_attention=True,
                                        recompute_granularity="selective",
                                        recompute_modules=["core_attn"]),
    "selective-mlp": dict(recompute_granularity="selective", recompute_modules=["mlp"]),
    "moe-none": dict(moe=True),
    "moe-selective-moe": dict(moe=True, recompute_granularity="selective",
                              recompute_modules=["moe"]),
    "moe-shared-experts": dict(moe=True, shared=True, recompute_granularity="selective",
                               recompute_modules=["shared_experts"]),
    "moe-full-uniform": dict(moe=True, recompute_granularity="full", recompute_method="uniform",
                             recompute_num_layers=1),
    # Megatron's own per-layer CUDA graphs ("local"): its schedule captures each layer after the
    # first step and replays it after; each layer's backward replay calls TE's
    # reduce_and_update_fp8_tensors(forward=False) itself (cuda_graphs.py). Megatron refuses full
    # recompute there (only with full-iteration graphs); selective recompute runs inside a graph.
    # Megatron's graphs need TE's RNG tracker (use_te_rng_tracker).
    "cuda-graph-local": dict(cuda_graph_impl="local", use_te_rng_tracker=True, steps=4),
    "cuda-graph-local-selective-mlp": dict(cuda_graph_impl="local", use_te_rng_tracker=True,
                                           recompute_granularity="selective",
                                           recompute_modules=["mlp"], steps=4),
    # TE's CUDA graphs through Megatron ("transformer_engine"): Megatron's TECudaGraphHelper runs
    # te.make_graphed_callables over each layer (FP8, Megatron's recipe and weight caching); as
    # its training loop does, it captures after the first step here, and the layers replay their
    # graphs after. The -selective-mlp row checkpoints the MLP inside the graphed layer.
    "cuda-graph-te": dict(cuda_graph_impl="transformer_engine", use_te_rng_tracker=True,
                          steps=4),
    "cuda-graph-te-selective-mlp": dict(cuda_graph_impl="transformer_engine",
                                        use_te_rng_tracker=True,
                                        recompute_granularity="selective",
                                        recompute_modules=["mlp"], steps=4),
}


def twin_of(row: Dict[str, Any]) -> Dict[str, Any]:
    """The row's config without recompute."""
    return {k: v for k, v in row.items() if not k.startswith("recompute")}


def init_distributed() -> None:
    import torch

    if torch.distributed.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("nccl")
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1,
                                             pipeline_model_parallel_size=1)


def build_model(args, row: Dict[str, Any], seed: int):
    import torch
    from megatron.core.models.gpt.gpt_layer_specs import \
        get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    overrides = dict(row)
    overrides.pop("steps", None)
    attention = AttnBackend[overrides.pop("attention", "unfused")]
    moe = overrides.pop("moe", False)
    shared = overrides.pop("shared", False)
    kw: Dict[str, Any] = dict(
        num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        ffn_hidden_size=4 * args.hidden, kv_channels=args.hidden // args.heads,
        params_dtype=torch.bfloat16, bf16=True, pipeline_dtype=torch.bfloat16,
        hidden_dropout=0.0, attention_dropout=0.0,
        fp8="hybrid", fp8_recipe=args.fp8_recipe, fp8_amax_history_len=16,
        fp8_amax_compute_algo="max",
        deterministic_mode=True, attention_backend=attention)
    if moe:
        kw.update(num_moe_experts=4, moe_router_topk=2, moe_grouped_gemm=True,
                  moe_ffn_hidden_size=2 * args.hidden, moe_aux_loss_coeff=0.0,
                  moe_router_load_balancing_type="none", moe_token_dispatcher_type="alltoall")
        if shared:  # Megatron refuses biases in shared experts
            kw.update(moe_shared_expert_intermediate_size=2 * args.hidden, add_bias_linear=False)
    kw.update(overrides)
    config = TransformerConfig(**kw)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    te_rng = bool(kw.get("use_te_rng_tracker"))  # a fresh tracker of the kind the row needs
    model_parallel_cuda_manual_seed(seed, te_rng_tracker=te_rng, force_reset_rng=te_rng)
    spec = get_gpt_layer_with_transformer_engine_spec(num_experts=4 if moe else None,
                                                      moe_grouped_gemm=moe)
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args.vocab,
                     max_sequence_length=args.seq, position_embedding_type="rope")
    model = model.cuda()
    if kw.get("cuda_graph_impl") in ("local", "transformer_engine"):
        # Megatron's backward graphs accumulate into its DDP buffers (param.main_grad); its TE
        # graph helper zeroes them after the capture.
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

        model = DistributedDataParallel(config, DistributedDataParallelConfig(), model)
    return model


def batches(args, seed: int, count: int) -> List[Dict[str, Any]]:
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    out = []
    for _ in range(count):
        tokens = torch.randint(0, args.vocab, (args.mbs, args.seq + 1), generator=gen)
        out.append({"tokens": tokens[:, :-1].cuda(), "labels": tokens[:, 1:].cuda(),
                    "position_ids": torch.arange(args.seq).expand(args.mbs, -1).cuda()})
    return out


def pr_state(manager: Any) -> Dict[str, Any]:
    """TE PR #3456's state (pr_3456/apply.py's TE): update pending, scope depth, the task holding
    the callback slot (healthy between microbatches: False, 0, None); {} on a TE without it."""
    from te_driver import global_state

    state = global_state(manager)
    if not hasattr(state, "quantization_backward_scope_depth"):
        return {}
    return {"pending": state.pending_backward_quantization_update,
            "depth": state.quantization_backward_scope_depth,
            "slot": state.backward_quantization_update_callback_task_id}


class Microbatches:
    """forward_step_func for Megatron's schedule that also cuts TE's update counts per logical
    microbatch: no_pipelining runs forward i, then backward i, then forward i+1, so the counts
    taken at each forward_step start belong to the microbatch before it."""

    def __init__(self, counter: Any, manager: Any, markers: bool) -> None:
        self.counter, self.manager, self.markers = counter, manager, markers
        self.records: List[Dict[str, Any]] = []
        self.losses: List[Any] = []
        self.open = False

    def close(self) -> None:
        if not self.open:
            return
        import torch

        if self.markers:
            torch.cuda.nvtx.range_pop()
        fwd, bwd = self.counter.take()
        from te_fix import stash_entries

        self.records[-1].update(forward=fwd, backward=bwd,
                                stash_left=stash_entries(self.manager), **pr_state(self.manager))
        self.open = False

    def step(self, data_iterator, model):
        import torch

        self.close()
        self.records.append({"microbatch": len(self.records)})
        self.open = True
        if self.markers:
            torch.cuda.nvtx.range_push("fp8audit.microbatch")
        batch = next(data_iterator)
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            self.losses.append(loss.detach().clone())
            return loss, {"lm loss": loss.detach()}

        return output, loss_func


def grads(model) -> List[Any]:
    out = []
    for _, p in sorted(model.named_parameters()):
        g = getattr(p, "main_grad", None)
        g = p.grad if g is None else g
        out.append(None if g is None else g.detach().clone())
    return out


def train(args, row: Dict[str, Any], counter: Any, manager: Any, te: Any, *,
          keep_tensors: bool = True, model: Any = None) -> Dict[str, Any]:
    """Trains the row's model (built here from the seed unless given) for args.steps steps of
    args.microbatches; TE's FP8 state starts afresh for a model built here."""
    import torch
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from te_fix import reset_te
    from te_layouts import fp8_state

    given = model is not None
    if not given:  # a given model's modules are registered in TE's buffers: keep them
        reset_te(te)
    counter.take()
    model = model if given else build_model(args, row, args.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = max(args.steps, row.get("steps", 0))  # a CUDA-graph row: capture, then replays
    data = batches(args, args.seed, steps * args.microbatches)
    mb = Microbatches(counter, manager, args.markers)
    fb = get_forward_backward_func()
    states, step_grads, errors, seconds = [], [], [], []
    capture: Optional[Dict[str, Any]] = None
    it = iter(data)
    for step in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            fb(forward_step_func=mb.step, data_iterator=it, model=model,
               num_microbatches=args.microbatches, seq_length=args.seq,
               micro_batch_size=args.mbs, forward_only=False)
        except Exception as e:  # TE's own error in a layout it cannot run, or the patch's
            errors.append({"step": step, "microbatch": len(mb.records) - 1,
                           "error": f"{type(e).__name__}: {e}",
                           "where": traceback.format_exc(limit=-12)})
            mb.close()
            mb.records[-1]["failed"] = errors[-1]["error"]
            gc.collect()
            break
        mb.close()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if step == 0 and row.get("cuda_graph_impl") == "transformer_engine":
            try:
                capture = capture_te_graphs(args, model, counter)
            except Exception as e:  # the patch's refusal, or TE's own failure at capture
                capture = {"error": f"{type(e).__name__}: {e}",
                           "where": traceback.format_exc(limit=-12)}
                errors.append({"step": step, "microbatch": len(mb.records) - 1, **capture})
                break
        if keep_tensors:
            states.append(fp8_state([model]))
            step_grads.append(grads(model))
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    for r in mb.records:
        r["step"] = r["microbatch"] // args.microbatches
    out = {"records": mb.records, "losses": mb.losses, "states": states, "grads": step_grads,
           "errors": errors, "seconds": seconds, "capture": capture}
    del optimizer
    if not given:
        del model
        gc.collect()
        torch.cuda.empty_cache()
    return out


def capture_te_graphs(args, model: Any, counter: Any) -> Dict[str, Any]:
    """Megatron's TE CUDA graphs, as its training loop makes them: TECudaGraphHelper's capture
    (te.make_graphed_callables over every layer, with its warm-up passes) and its manual hooks.
    Returns TE's update counts during the capture, which belong to no microbatch."""
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.core.transformer.cuda_graphs import TECudaGraphHelper

    try:  # the helper sizes its warm-up by it; Megatron's training loop sets it up first
        calculator.get_num_microbatches()
    except AttributeError:
        calculator.init_num_microbatches_calculator(
            0, None, args.mbs * args.microbatches, args.mbs, 1)
    counter.take()
    helper = TECudaGraphHelper([model], model.config, args.seq, args.mbs, optimizers=[])
    helper.create_cudagraphs()
    helper.cuda_graph_set_manual_hooks()
    forward, backward = counter.take()
    return {"forward": forward, "backward": backward}


class Diagnostics:
    """--diagnose (unpatched runs only: the patch refuses a TE whose functions were wrapped):
    logs every _CheckpointFunction forward and backward with its depth in other checkpoint
    backwards (a recompute inside a recompute), the checkpointed callable and the stack where a
    backward starts inside another."""

    def __init__(self) -> None:
        from transformer_engine.pytorch import distributed as d

        self.d = d
        self.log: List[Dict[str, Any]] = []
        self.stack: List[int] = []
        self.fwd = d._CheckpointFunction.__dict__["forward"]
        self.bwd = d._CheckpointFunction.__dict__["backward"]
        diag = self

        def name(fn: Any) -> str:
            return getattr(fn, "__qualname__", None) or type(fn).__qualname__

        def forward(ctx, run_function, *rest):
            diag.log.append({"event": "forward", "ctx": id(ctx), "fn": name(run_function),
                             "in_backward_depth": len(diag.stack)})
            return diag.fwd.__func__(ctx, run_function, *rest)

        def backward(ctx, *grads):
            entry = {"event": "backward", "ctx": id(ctx), "fn": name(ctx.run_function),
                     "depth": len(diag.stack), "same_ctx_open": id(ctx) in diag.stack}
            if diag.stack:
                entry["stack"] = [f"{f.filename.rsplit('/', 3)[-1]}:{f.lineno} {f.name}"
                                  for f in traceback.extract_stack(limit=40)]
            diag.log.append(entry)
            diag.stack.append(id(ctx))
            try:
                return diag.bwd.__func__(ctx, *grads)
            finally:
                diag.stack.pop()

        d._CheckpointFunction.forward = staticmethod(forward)
        d._CheckpointFunction.backward = staticmethod(backward)

    def remove(self) -> None:
        self.d._CheckpointFunction.forward = self.fwd
        self.d._CheckpointFunction.backward = self.bwd

    def summary(self) -> Dict[str, Any]:
        nested = [e for e in self.log if e["event"] == "backward" and e["depth"] > 0]
        return {"kind": "diagnostics", "forwards": sum(e["event"] == "forward" for e in self.log),
                "backwards": sum(e["event"] == "backward" for e in self.log),
                "forwards_inside_backward": sum(e["event"] == "forward" and
                                                e["in_backward_depth"] > 0 for e in self.log),
                "nested_backwards": len(nested), "first_nested": nested[:2],
                "log_head": self.log[:40]}


def first_difference(a: List[Any], b: List[Any]) -> Optional[Tuple[int, int]]:
    """(item, tensor) of the first difference between two lists of lists of tensors."""
    import torch

    if len(a) != len(b):
        return (-1, -1)
    for i, (x, y) in enumerate(zip(a, b)):
        xs = x if isinstance(x, list) else [x]
        ys = y if isinstance(y, list) else [y]
        if len(xs) != len(ys):
            return (i, -1)
        for j, (s, t) in enumerate(zip(xs, ys)):
            if (s is None) != (t is None):
                return (i, j)
            if s is not None and (s.shape != t.shape or not torch.equal(s, t)):
                return (i, j)
    return None


def max_difference(a: List[Any], b: List[Any]) -> Optional[float]:
    """Largest relative difference over the gradients (where not bitwise equal)."""
    worst = 0.0
    for x, y in zip(a, b):
        for s, t in zip(x, y):
            if s is None or t is None or s.shape != t.shape:
                continue
            d = (s.float() - t.float()).abs().max().item()
            scale = t.float().abs().max().item() or 1.0
            worst = max(worst, d / scale)
    return worst


def twin_differences(run: Dict[str, Any], twin: Dict[str, Any]) -> Dict[str, Any]:
    """A run's losses and gradients against its twin's: the first difference of each, and the
    largest relative gradient difference."""
    return {"loss_first_difference": first_difference(run["losses"], twin["losses"]),
            "grads_first_difference": first_difference(run["grads"], twin["grads"]),
            "grads_max_relative_difference": max_difference(run["grads"], twin["grads"])}


@contextlib.contextmanager
def mode_context(manager: Any, mode: str):
    from te_fix import counted

    if mode == "hook":  # the environment decides (fp8audit run --fix-te or plain)
        from te_driver import Counter

        counter = Counter(manager)
        try:
            yield counter
        finally:
            counter.remove()
        return
    with counted(manager, mode, verify=False) as counter:
        yield counter


def run_row(args, name: str, mode: str, manager: Any, te: Any) -> List[Dict[str, Any]]:
    import fp8audit.te

    row = ROWS[name]
    diag = Diagnostics() if args.diagnose and mode == "unpatched" else None
    with mode_context(manager, mode) as counter:
        run = train(args, row, counter, manager, te)
        if diag is not None:
            diag.remove()
        patched = fp8audit.te.is_patched()
        violations = list(fp8audit.te.active().violations) if patched else []
        twin = train(args, twin_of(row), counter, manager, te) if args.twin else None
    lines: List[Dict[str, Any]] = []
    for r in run["records"]:
        lines.append({"kind": "microbatch", "row": name, "mode": mode, **r})
    summary: Dict[str, Any] = {
        "kind": "run", "row": name, "mode": mode, "patched": patched,
        "te_version": getattr(sys.modules.get("transformer_engine"), "__version__", None),
        "errors": run["errors"], "violations": violations[:5],
        "microbatches": len(run["records"]), "seconds": run["seconds"],
        "capture_counts": run["capture"]}
    if twin is not None:
        summary["twin_counts"] = [(r.get("forward"), r.get("backward")) for r in twin["records"]]
        summary["twin_errors"] = twin["errors"]
        summary["state_first_difference"] = first_difference(run["states"], twin["states"])
        summary["loss_first_difference"] = first_difference(run["losses"], twin["losses"])
        summary["grads_first_difference"] = first_difference(run["grads"], twin["grads"])
        summary["grads_max_relative_difference"] = max_difference(run["grads"], twin["grads"])
        summary["bitwise_equal_to_twin"] = (not run["errors"] and not twin["errors"] and all(
            summary[k] is None for k in ("state_first_difference", "loss_first_difference",
                                         "grads_first_difference")))
    lines.append(summary)
    if diag is not None:
        lines.append({"row": name, "mode": mode, **diag.summary()})
    return lines


def timing(args, manager: Any, te: Any) -> Dict[str, Any]:
    """The fix's cost or saving on the row's model: unpatched and patched rounds alternating in
    this process, each round args.steps steps (the first step of each round, a warm-up, left
    out); per-step medians with a 95% interval of the median (order statistics). With
    --toggle agent (under `fp8audit run`, no fix) the rounds rotate the agent's recording instead:
    off, its probes alone (the Python hook off), all on (fp8audit._agent.set_recording)."""
    from fp8audit import _agent

    arms: Tuple[str, ...] = ("agent_off", "agent_probes", "agent_on") if args.toggle == "agent" \
        else ("unpatched", "patched")
    if args.toggle == "agent" and not _agent.set_recording(True):
        return {"kind": "timing", "row": args.row[0], "errors": [
            "--toggle agent: the agent is not preloaded (run under fp8audit run) or has no probe"]}
    times: Dict[str, List[float]] = {arm: [] for arm in arms}
    counts: Dict[str, Any] = {}
    from te_fix import reset_te

    reset_te(te)
    model = build_model(args, ROWS[args.row[0]], args.seed)  # one model: the rounds differ only
    for index in range(args.rounds):                          # by the patch (or the agent)
        for arm in arms[index % len(arms):] + arms[:index % len(arms)]:  # each arm first in turn
            mode = "patched" if arm == "patched" else "unpatched"
            if args.toggle == "agent":
                _agent.set_recording(arm != "agent_off", hook=arm == "agent_on")
            with mode_context(manager, mode) as counter:
                run = train(args, ROWS[args.row[0]], counter, manager, te, keep_tensors=False,
                            model=model)
            if run["errors"]:
                return {"kind": "timing", "row": args.row[0], "mode": arm,
                        "errors": run["errors"][:2]}
            times[arm] += run["seconds"][1:]
            counts[arm] = [(r.get("forward"), r.get("backward")) for r in run["records"][:2]]
    if args.toggle == "agent":
        _agent.set_recording(True)
    out: Dict[str, Any] = {"kind": "timing", "row": args.row[0], "rounds": args.rounds,
                           "layers": args.layers, "hidden": args.hidden, "seq": args.seq,
                           "mbs": args.mbs, "microbatches": args.microbatches}
    for mode, values in times.items():
        out[mode + "_s"] = values
        out[mode + "_median_s"] = statistics.median(values)
        out[mode + "_ci95_s"] = median_interval(values)
    for arm in arms[1:]:
        out["ratio_" + arm + "_over_" + arms[0]] = out[arm + "_median_s"] / out[arms[0] + "_median_s"]
    out["counts_first_microbatches"] = counts
    return out


def median_interval(values: List[float]) -> Tuple[float, float]:
    """A distribution-free 95% interval for the median: order statistics n/2 -+ 0.98 sqrt(n)."""
    s = sorted(values)
    n = len(s)
    half = 0.98 * n ** 0.5
    lo = max(0, int(n / 2 - half))
    hi = min(n - 1, int(n / 2 + half + 0.999))
    return (s[lo], s[hi])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", action="append", choices=sorted(ROWS),
                   help="default: all rows but the cuda-graph ones (one of those per process)")
    p.add_argument("--mode", choices=["unpatched", "patched", "both", "hook"], default="both")
    p.add_argument("--no-twin", dest="twin", action="store_false",
                   help="skip the no-recompute twin (counts only)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--mbs", type=int, default=2, help="micro batch size")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--microbatches", type=int, default=4, help="per step (accumulation)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--fp8-recipe", choices=["delayed", "tensorwise", "blockwise"],
                   default="delayed", help="Megatron's fp8_recipe (tensorwise: TE's "
                   "Float8CurrentScaling, blockwise: Float8BlockScaling; no global state updates)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--markers", action="store_true",
                   help="an NVTX range fp8audit.microbatch around each logical microbatch")
    p.add_argument("--megatron-markers", action="store_true",
                   help="fp8audit.megatron.mark_microbatches(): ranges with ids on Megatron's own "
                        "forward_step and backward_step (instead of --markers)")
    p.add_argument("--diagnose", action="store_true",
                   help="log TE's checkpoint forwards and backwards (unpatched runs)")
    p.add_argument("--time", action="store_true", help="time the first --row, patch toggled")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--toggle", choices=["fix", "agent"], default="fix",
                   help="--time: what alternates between rounds (agent: under fp8audit run)")
    args = p.parse_args(argv)
    os.environ.setdefault("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "0")
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    # FP8 attention where cuDNN's FP8 fused attention is not deterministic (sm90 needs cuDNN
    # 9.19): TE's unfused DotProductAttention with FP8 emulation (quantize-dequantize).
    os.environ.setdefault("NVTE_UnfusedDPA_Emulate_FP8", "1")
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from te_fix import import_te

    _, te, _, manager = import_te(False)
    init_distributed()
    if args.megatron_markers:
        import fp8audit.megatron

        if not fp8audit.megatron.mark_microbatches():
            print("megatron_live: fp8audit.megatron.mark_microbatches() found no schedule",
                  file=sys.stderr)
            return 2
    if args.time:
        args.row = args.row or ["full-uniform"]
        print(json.dumps(timing(args, manager, te)), flush=True)
        return 0
    modes = ["unpatched", "patched"] if args.mode == "both" else [args.mode]
    # Megatron keeps its CUDA graphs process-wide (one capture per process): those rows run
    # only when named, one per process.
    for name in args.row or [r for r in ROWS if not r.startswith("cuda-graph")]:
        for mode in modes:
            for line in run_row(args, name, mode, manager, te):
                print(json.dumps(line, default=str), flush=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
