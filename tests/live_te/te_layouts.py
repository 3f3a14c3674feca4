"""Training layouts for the live acceptance of fp8audit.te (issue 14), on any TE-like package: real
TE 2.20.2 on the GPU (te_fix.py) or the CPU stand-in (tests/python). Each layout builds its layers
from a seed and runs one microbatch's forward with checkpointing, or as its twin without any
checkpointing (same layers, same autocasts), so FP8 state and gradients can be compared bitwise.

Public TE APIs only: te.Linear, te.LayerNormLinear, te.LayerNormMLP (checkpoint=True too),
te.TransformerLayer (GPU), te.autocast with DelayedScaling, te.checkpoint."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch


class Injected(RuntimeError):
    """The failure a layout injects (caught by the training loop)."""


@dataclass
class Layout:
    name: str
    build: Callable[[Any, int], List[torch.nn.Module]]
    # forward(te, ctx, layers, x, checkpointing) -> output
    forward: Callable[..., torch.Tensor]
    # expected per microbatch when patched (forward, backward); None: 1/1
    patched: Optional[Callable[[int], tuple]] = None
    twin_comparable: bool = True  # FP8 state and grads must equal the no-checkpoint twin
    needs: tuple = ()  # TE attributes required (skipped where missing, e.g. on the stand-in)
    after_forward: Optional[Callable[[List[torch.nn.Module], int], None]] = None
    backward_fails: Optional[Callable[[int], bool]] = None
    microbatches: Optional[int] = None
    eval_modules: bool = False  # every module in eval mode at forward
    cuda_only: bool = False  # CUDA graphs, torch.compile of TE modules: not on the CPU stand-in
    refused: bool = False  # the fix refuses it (NotCovered) before its first microbatch runs
    modelled: bool = True  # False: no scenario (CUDA-graph capture, te.ops fusers: not modelled)


@dataclass
class Ctx:
    """What a forward may consult: the microbatch index, the recipe, the phase of a callable."""
    mb: int = 0
    recipe: Any = None
    calls: Dict[int, int] = field(default_factory=dict)
    group: Any = None  # the amax reduction group (None: TE's default, the world when initialised)

    def autocast(self, te: Any):
        if self.group is None:
            return te.autocast(enabled=True, recipe=self.recipe)
        return te.autocast(enabled=True, recipe=self.recipe, amax_reduction_group=self.group)


def _ckpt(te: Any, fn: Callable, x: torch.Tensor, checkpointing: bool, reentrant: bool):
    if not checkpointing:
        return fn(x)
    return te.checkpoint(fn, x, use_reentrant=reentrant)


def _seq(layers: List[torch.nn.Module]) -> Callable:
    def run(t):
        for layer in layers:
            t = layer(t)
        return t
    return run


def linears(n: int) -> Callable[[Any, int], List[torch.nn.Module]]:
    return lambda te, h: [te.Linear(h, h) for _ in range(n)]


def _per_layer(reentrant: bool):
    def fwd(te, ctx, layers, x, checkpointing):
        with ctx.autocast(te):
            for layer in layers:
                x = _ckpt(te, layer, x, checkpointing, reentrant)
        return x
    return fwd


def _single(reentrant: bool):
    def fwd(te, ctx, layers, x, checkpointing):
        with ctx.autocast(te):
            return _ckpt(te, _seq(layers), x, checkpointing, reentrant)
    return fwd


def _none(te, ctx, layers, x, checkpointing):
    with ctx.autocast(te):
        return _seq(layers)(x)


def _nested(te, ctx, layers, x, checkpointing):
    def outer(t):
        t = _ckpt(te, layers[0], t, checkpointing, True)
        return _seq(layers[1:])(t)
    with ctx.autocast(te):
        return _ckpt(te, outer, x, checkpointing, True)


def _inner_autocast(reentrant: bool):
    def fwd(te, ctx, layers, x, checkpointing):
        def body(t):
            with ctx.autocast(te):
                return _seq(layers)(t)
        return _ckpt(te, body, x, checkpointing, reentrant)
    return fwd


def _inner_autocast_disabled_outer(reentrant: Optional[bool]):
    # TE's own layout (test_numerics.py, _test_e2e_full_recompute(inner_autocast=True)): FP8
    # disabled in the outer autocast, enabled in one opened inside the checkpointed callable;
    # reentrant None: the same without a checkpoint.
    def fwd(te, ctx, layers, x, checkpointing):
        def body(t):
            with ctx.autocast(te):
                return _seq(layers)(t)
        with te.autocast(enabled=False, recipe=ctx.recipe):
            if reentrant is None:
                return body(x)
            return _ckpt(te, body, x, checkpointing, reentrant)
    return fwd


def _nested_autocast(te, ctx, layers, x, checkpointing):
    with ctx.autocast(te):
        with ctx.autocast(te):
            x = layers[0](x)
        x = layers[1](x)
        return _ckpt(te, layers[2], x, checkpointing, True)


def _no_grad_checkpoint(te, ctx, layers, x, checkpointing):
    with torch.no_grad(), ctx.autocast(te):  # an evaluation forward: no update, no stash left
        _ckpt(te, _seq(layers), x.detach(), checkpointing, True)
    with ctx.autocast(te):
        return _ckpt(te, _seq(layers), x, checkpointing, True)


def _to_eval_after_forward(layers, mb):
    del mb
    for layer in layers:
        layer.eval()


def _exception_forward(te, ctx, layers, x, checkpointing):
    # As scenarios/exception-forward.textproto: a checkpoint of the first layer that raises in
    # microbatch 1 after that layer ran (caught; in other microbatches its output is used), then
    # a checkpoint per layer.
    def first(t):
        t = layers[0](t)
        if ctx.mb == 1:
            raise Injected("checkpointed forward fails")
        return t

    with ctx.autocast(te):
        try:
            x = _ckpt(te, first, x, checkpointing, True)
        except Injected:
            pass
        for layer in layers:
            x = _ckpt(te, layer, x, checkpointing, True)
    return x


def _exception_recompute(te, ctx, layers, x, checkpointing):
    calls = ctx.calls

    def body(t, i):
        calls[i] = calls.get(i, 0) + 1
        if ctx.mb == 1 and i == 0 and calls[i] == 2:
            raise Injected("recompute fails")
        return layers[i](t)

    with ctx.autocast(te):
        for i in range(len(layers)):
            x = _ckpt(te, lambda t, i=i: body(t, i), x, checkpointing, True)
    return x


def _transformer_layers(te, h):
    return [te.TransformerLayer(h, 4 * h, max(1, h // 64), hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=torch.float32)
            for _ in range(2)]


def _transformer_per_layer(te, ctx, layers, x, checkpointing):
    # Megatron-style: each TransformerLayer under te.checkpoint (reentrant); x is [s, b, h].
    with ctx.autocast(te):
        for layer in layers:
            x = _ckpt(te, layer, x, checkpointing, True)
    return x


def _transformer_core_attention(te, ctx, layers, x, checkpointing):
    with ctx.autocast(te):
        for layer in layers:
            x = layer(x, checkpoint_core_attention=checkpointing)
    return x


def _block(te, h):
    # a decoder block of TE's parts: LayerNormLinear (QKV-like), Linear (projection), LayerNormMLP
    return [torch.nn.Sequential(te.LayerNormLinear(h, h), te.Linear(h, h), te.LayerNormMLP(h, 2 * h))
            for _ in range(2)]


def _mlp_checkpoint(te, h):
    return [te.LayerNormMLP(h, 2 * h, checkpoint=True), te.Linear(h, h)]


def _mlp_checkpoint_twin(te, ctx, layers, x, checkpointing):
    with ctx.autocast(te):
        mlp = layers[0]
        previous = mlp.checkpoint
        mlp.checkpoint = checkpointing  # the twin is the same module without its own recompute
        try:
            return layers[1](mlp(x))
        finally:
            mlp.checkpoint = previous


# Issue 20's module rows (GPU only): what fp8audit.te leaves out or must refuse.


def _grouped(te, h):
    return [te.GroupedLinear(2, h, h) for _ in range(3)]


def _grouped_per_layer(te, ctx, layers, x, checkpointing):
    x = x.reshape(-1, x.shape[-1])
    splits = [x.shape[0] // 2, x.shape[0] - x.shape[0] // 2]
    with ctx.autocast(te):
        for layer in layers:
            x = _ckpt(te, lambda t, layer=layer: layer(t, splits), x, checkpointing, True)
    return x


def _ops(te, h):
    return [te.ops.Sequential(te.ops.Linear(h, h)) for _ in range(3)]


def _compiled(te, h):
    return [torch.compile(te.Linear(h, h)) for _ in range(3)]


class _Graphed(torch.nn.Module):
    """Three te.Linear under te.make_graphed_callables (fp8, the context's recipe), captured at
    the first forward, with (checkpoint=True) or without a reentrant te.checkpoint per layer
    inside the graphed callable."""

    def __init__(self, te, h, checkpoint: bool) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(te.Linear(h, h) for _ in range(3))
        self.checkpoint = checkpoint
        self.te = te
        self.graphed: Dict[bool, Any] = {}

    def forward(self, x):
        use = self.checkpoint and torch.is_grad_enabled() and getattr(self, "_ckpt_now", True)
        for layer in self.layers:
            x = _ckpt(self.te, layer, x, use, True)
        return x


def _graphed_forward(te, ctx, layers, x, checkpointing):
    wrapper = layers[0]
    wrapper._ckpt_now = checkpointing
    if checkpointing not in wrapper.graphed:
        sample = torch.randn_like(x).requires_grad_()
        wrapper.graphed[checkpointing] = te.make_graphed_callables(
            wrapper, (sample,), fp8_enabled=True, fp8_recipe=ctx.recipe)
    with ctx.autocast(te):
        return wrapper.graphed[checkpointing](x)


LAYOUTS: Dict[str, Layout] = {}


def _add(layout: Layout) -> None:
    LAYOUTS[layout.name] = layout


_add(Layout("none", linears(3), _none))
_add(Layout("non-reentrant-single", linears(3), _single(False)))
_add(Layout("non-reentrant-per-layer", linears(3), _per_layer(False)))
_add(Layout("reentrant-single-1", linears(1), _single(True)))
_add(Layout("reentrant-single-3", linears(3), _single(True)))
_add(Layout("reentrant-per-layer", linears(3), _per_layer(True)))
_add(Layout("nested", linears(3), _nested))
_add(Layout("inner-autocast-reentrant", linears(3), _inner_autocast(True)))
_add(Layout("inner-autocast-non-reentrant", linears(3), _inner_autocast(False)))
_add(Layout("inner-autocast-disabled-outer-reentrant", linears(3),
            _inner_autocast_disabled_outer(True)))
_add(Layout("inner-autocast-disabled-outer-non-reentrant", linears(3),
            _inner_autocast_disabled_outer(False)))
_add(Layout("inner-autocast-disabled-outer-none", linears(3), _inner_autocast_disabled_outer(None)))
_add(Layout("eval-reentrant", linears(3), _single(True), eval_modules=True))
_add(Layout("eval-non-reentrant", linears(3), _single(False), eval_modules=True))
_add(Layout("mode-change", linears(3), _single(True), after_forward=_to_eval_after_forward))
_add(Layout("no-grad-checkpoint", linears(3), _no_grad_checkpoint))
_add(Layout("nested-autocast", linears(3), _nested_autocast))
# The twin cannot follow: without a checkpoint frame to roll back, the failed forward consumed the
# first-module flag, so the twin loses that microbatch's backward update (TE and fixed alike).
_add(Layout("exception-forward", linears(3), _exception_forward, twin_comparable=False))
_add(Layout("exception-recompute", linears(3), _exception_recompute,
            patched=lambda mb: (1, 0) if mb == 1 else (1, 1), twin_comparable=False,
            backward_fails=lambda mb: mb == 1))
_add(Layout("layernorm-linear", lambda te, h: [te.LayerNormLinear(h, h) for _ in range(3)],
            _per_layer(True)))
_add(Layout("layernorm-mlp", lambda te, h: [te.LayerNormMLP(h, 2 * h) for _ in range(3)],
            _per_layer(True)))
_add(Layout("layernorm-mlp-checkpoint", _mlp_checkpoint, _mlp_checkpoint_twin))
_add(Layout("decoder-blocks-per-layer", _block, _per_layer(True)))
_add(Layout("decoder-blocks-non-reentrant", _block, _per_layer(False)))
_add(Layout("transformer-layer-per-layer", _transformer_layers, _transformer_per_layer,
            needs=("TransformerLayer",)))
_add(Layout("transformer-layer-core-attention", _transformer_layers, _transformer_core_attention,
            needs=("TransformerLayer",)))
_add(Layout("decoder-28x7", lambda te, h: [torch.nn.Sequential(*[te.Linear(h, h) for _ in range(7)])
                                          for _ in range(28)], _per_layer(True), microbatches=4))

_add(Layout("grouped-linear-per-layer", _grouped, _grouped_per_layer, needs=("GroupedLinear",)))
# A te.ops fuser asks for the first-module flag only in a forward that records a backward
# (ops/fuser.py), and TE's checkpoint hands a module of te.ops alone to torch's, whose recompute
# runs without FP8 after the autocast: TE runs no backward update. The fix refuses it
# (_ops_fuser.py: te.ops keeps no recompute stash).
_add(Layout("ops-sequential-per-layer", _ops, _per_layer(True), needs=("ops",), refused=True,
            modelled=False))
_add(Layout("compile-per-layer", _compiled, _per_layer(True), cuda_only=True))
_add(Layout("graphed-plain", lambda te, h: [_Graphed(te, h, False)], _graphed_forward,
            needs=("make_graphed_callables",), cuda_only=True, modelled=False))
_add(Layout("graphed-checkpoint", lambda te, h: [_Graphed(te, h, True)], _graphed_forward,
            needs=("make_graphed_callables",), cuda_only=True, modelled=False, refused=True))

STANDIN_HAS = ("ops",)  # the TE attributes of `needs` that the CPU stand-in has


def cpu_layouts() -> List[str]:
    """The layouts the CPU stand-in runs with a scenario and under the fix (every TE attribute
    they need there, no CUDA, not the big one, modelled, not refused)."""
    return [name for name, layout in LAYOUTS.items()
            if set(layout.needs) <= set(STANDIN_HAS) and not layout.cuda_only
            and name != "decoder-28x7" and layout.modelled and not layout.refused]


def fp8_state(layers: List[torch.nn.Module]) -> List[torch.Tensor]:
    """Every module's amax histories and scales, in a fixed order (clones)."""
    out = []
    for layer in layers:
        for module in layer.modules():
            meta = getattr(module, "fp8_meta", None)
            if not meta:
                continue
            for key in ("scaling_fwd", "scaling_bwd"):
                state = meta.get(key)
                if state is not None and hasattr(state, "amax_history"):
                    out += [state.amax_history.detach().clone(), state.scale.detach().clone()]
    return out


def first_difference(a: List[torch.Tensor], b: List[torch.Tensor]) -> Optional[int]:
    if len(a) != len(b):
        return -1
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or not torch.equal(x, y):
            return i
    return None


@contextlib.contextmanager
def seeded(seed: int):
    state = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
