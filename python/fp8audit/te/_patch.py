"""The fixed FP8 ownership applied to an installed Transformer Engine.

The C++ ownership model (state/, fixed semantics) holds the first-module flag and decides every
transition; the replaced TE functions report transitions to it and apply its decisions:

- The flag: the only way to consume it is `is_first_fp8_module()`, which asks the model. Where
  the release keeps it in FP8GlobalStateManager.quantization_state, that object's class becomes a
  subclass whose `is_first_fp8_module` reads the model's flag and ignores writes, so TE's depth-0
  re-arm, its autocast snapshot restores and the modules' recompute-phase put-backs change
  nothing (_state_layouts.py; before TE 2.15 the flag is a class attribute that only mirrors).
- Autocast: autocast_enter tells the model (an autocast inside a recompute is a recompute scope);
  autocast_exit runs the forward update only when the model says so.
- Checkpoint frames: activation_recompute_forward's __enter__/__exit__ (every instance, whoever
  made it) open and close the model's frames and recomputes (with rollback on exceptions) and set
  TE's recompute globals from the model; _CheckpointFunction and get_activation_recompute_contexts
  pair each recompute with its own frame.
- Recompute metadata: TE's own stash and restore functions keep it, in TE's per-module buffer
  (`fp8_tensors_recompute_buffer`, found through `fp8_meta["global_fp8_buffer_pos_fwd_recompute"]`),
  so code relying on TE's stash contract sees TE's keys and calls; per-frame FIFOs of references
  to those entries say which one each recompute consumes (the model says where a module forward
  pushes and pops), and a frame that can never be recomputed takes its entries out of TE's buffer.
- LayerNormMLP(checkpoint=True): its forward consumes the flag like any module; its recompute in
  backward replays that decision; its private stash stays TE's.
"""

from __future__ import annotations

import collections
import sys
import threading
import weakref
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from . import (_megatron_ckpt, _megatron_graphs, _ops_fuser, _safety, _state_layouts, _targets,
               _torch_ckpt, releases)
from ._gate import resolve as _resolve
from ._backports import Backports
from ._model import Model

UNATTRIBUTED = 0  # module id for ownership reads whose module is not known
STASH_KEY = "global_fp8_buffer_pos_fwd_recompute"  # TE's fp8_meta key of a module's stash FIFO


class _Entry:
    """One stash entry: the module, TE's entry (the [amax_history, scale] list its stash function
    appended) and the FIFO of TE's buffer holding it."""

    __slots__ = ("module", "value", "fifo")

    def __init__(self, module: int, value: Any, fifo: Deque[Any]) -> None:
        self.module, self.value, self.fifo = module, value, fifo

    def take(self) -> None:
        """Out of TE's FIFO (a frame that will never be recomputed, or a consumed entry)."""
        for i, v in enumerate(self.fifo):
            if v is self.value:
                del self.fifo[i]
                return

    def held(self) -> bool:
        return any(v is self.value for v in self.fifo)


def _own_outputs(outputs: Any, inputs: Tuple[Any, ...]) -> Any:
    """What a reentrant checkpoint returns, with every tensor that requires grad but was made
    outside it (its forward runs under no_grad: a parameter the callable returns, as Megatron's
    MLP returns its output bias) replaced by a detached alias of the same storage. Returned as
    is, autograd makes that tensor an output of the checkpoint's own node: a parameter stops
    being a leaf and receiving .grad, and the recompute, which returns the same tensor, re-enters
    the node from its own backward (TE then pops an empty stash: IndexError)."""
    import torch

    given = {id(t) for t in inputs if torch.is_tensor(t)}

    def own(t: Any) -> Any:
        return t.detach() if torch.is_tensor(t) and t.requires_grad and id(t) not in given else t

    if isinstance(outputs, tuple) and not hasattr(outputs, "_fields"):
        return tuple(own(t) for t in outputs)
    if isinstance(outputs, list):
        return [own(t) for t in outputs]
    return own(outputs)


def _delayed_recipe(recipe: Any) -> bool:
    """Whether an autocast's recipe updates DelayedScaling state. A custom recipe may carry
    DelayedScaling requests (TE keeps global buffers for them): treated as DelayedScaling; for one
    without, the update is TE's no-op."""
    custom = getattr(recipe, "custom", None)
    return bool(recipe is not None and (recipe.delayed() or (custom and custom())))


class PatchRefused(RuntimeError):
    """fp8audit.te.patch() changed nothing; the message says why, in one line."""


class NotCovered(RuntimeError):
    """The job does something the fix does not cover (a checkpoint inside a CUDA-graphed
    callable, Megatron's local CUDA graphs, a te.ops fuser inside a checkpoint, torch's
    non-reentrant checkpoint of TE modules fed inputs that need no grad, several
    activation_recompute_forward frames opened directly and pending at once); raised before that
    part runs, with one line saying what to do."""


GRAPH_CHECKPOINT = ("fp8audit.te: a checkpoint inside a CUDA-graphed callable "
                    "(te.make_graphed_callables) is not covered by the fix; TE alone updates once "
                    "per microbatch there (tests/live_te/RESULTS.md): run this job without "
                    "--fix-te / fp8audit.te.patch()")

NON_REENTRANT_WITHOUT_GRAD = (
    "fp8audit.te: torch's non-reentrant checkpoint of Transformer Engine modules in FP8 whose "
    "inputs need no grad (the batch itself) is not covered: TE keeps a weight's column-wise FP8 "
    "copy for the original forward and not for the recompute, so torch raises CheckpointError in "
    "the backward, with the fix or without it. Start checkpointing after a layer whose output "
    "needs grad, call requires_grad_() on the input, or pass use_reentrant=True")

CHECKPOINT_WITHOUT_OUTPUT = (
    "fp8audit.te: Megatron's CheckpointWithoutOutput / activation_recompute_forward frames opened "
    "directly, several pending at once (recompute_modules mla_up_proj, layernorm or moe_act in 2+ "
    "layers, microbatches in flight, or a forward never backpropagated) in FP8 DelayedScaling, "
    "are not covered by the fix: their recomputes come in backward order and name no frame, so "
    "which forward's FP8 metadata each one restores is not known; take those modules out of "
    "--recompute-modules, or run this job without --fix-te / fp8audit.te.patch()")


class VerifyError(AssertionError):
    """In verify mode: what TE did differs from the ownership model."""


class _Tls(threading.local):
    def __init__(self) -> None:
        self.replay: Optional[bool] = None  # LayerNormMLP recompute: the forward's decision
        self.mlp_private = False  # inside _LayerNormMLP.forward/_recompute: TE's own stash
        self.pending_ctx: Any = None  # _CheckpointFunction ctx whose frame is being entered
        self.skip_frame = False  # that ctx opens no frame (a backport: see _backports.py)
        self.recompute_frame: Optional[int] = None  # frame a _CheckpointFunction backward redoes
        self.approved_forward = 0  # forward updates the model decided, not yet performed
        self.module = UNATTRIBUTED  # module of the last stash transition
        self.outer: List[Tuple[Optional[bool], bool]] = []  # saved at recompute entries


class Controller:
    """The installed patch: the model, the per-frame stashes and the originals to restore."""

    def __init__(self, mods: Dict[str, Any], version: str, verify: bool) -> None:
        self.mods = mods
        self.version = version
        self.verify = verify
        self.model = Model("fixed")
        self.lock = threading.RLock()
        self.tls = _Tls()
        self.module_ids: Dict[int, int] = {}
        self.stash: Dict[int, Deque[_Entry]] = {}
        self.transactions: List[Tuple[int, List[_Entry]]] = []
        self.unpaired: Deque[int] = collections.deque()  # frames whose recompute has no link
        self.owners = 0  # ownerships granted whose backward update has not run yet
        self.pending: set = set()  # frames (with a known graph) whose recompute has not run
        self.violations: List[str] = []
        self.originals: List[Tuple[Any, str, Any]] = []
        self.counts = {"forward": 0, "backward": 0}
        self.torch_routing: Optional[_torch_ckpt.Routing] = None
        self.megatron_routing = _megatron_ckpt.MegatronRouting(self)
        self.megatron_graphs = _megatron_graphs.MegatronGraphs(NotCovered)
        self.ops_fusers = _ops_fuser.OpsFusers(self.in_checkpoint, self.delayed_fp8, NotCovered)
        release = releases.get(version)
        self.release = release if release is not None else releases.Release(version, {})
        self.state = _state_layouts.for_release(self.release.state_layout, mods["quantization"])
        self.backports = Backports(mods, self.release, self.state)
        self.safety = _safety.LostUpdates(self.violations.append)

    # ---- helpers ---------------------------------------------------------------------------

    @staticmethod
    def grad() -> bool:
        import torch

        return torch.is_grad_enabled()

    def module_id(self, fp8_meta: Dict[str, Any]) -> int:
        key = id(fp8_meta)
        mid = self.module_ids.get(key)
        if mid is None:
            mid = self.module_ids[key] = len(self.module_ids) + 1
        return mid

    def in_checkpoint(self) -> bool:
        """A checkpoint frame of the model is open (its original forward or its recompute)."""
        with self.lock:
            return self.model is not None and self.model.open_frames > 0

    def delayed_fp8(self) -> bool:
        """FP8 is on, with DelayedScaling (a custom recipe counts, as at autocast entry)."""
        return bool(self.mods["quantization"].FP8GlobalStateManager.is_fp8_enabled()
                    and _delayed_recipe(self.state.recipe()))

    def problem(self, message: str) -> None:
        self.violations.append(message)
        if self.verify:
            raise VerifyError(f"fp8audit.te verify: {message}")

    def collect(self) -> None:
        for v in self.model.take_violations():
            self.problem(f"ownership model: {v}")

    def sync_globals(self) -> None:
        dist = self.mods["distributed"]
        region, phase = self.release.recompute_globals
        setattr(dist, region, self.model.recompute_region)
        setattr(dist, phase, self.model.recompute_phase)

    def check_globals(self) -> None:
        if not self.verify:
            return
        dist = self.mods["distributed"]
        now = tuple(getattr(dist, name) for name in self.release.recompute_globals)
        if now != (self.model.recompute_region, self.model.recompute_phase):
            self.problem(f"TE's recompute globals (region, phase) are {now}, the model's "
                         f"{(self.model.recompute_region, self.model.recompute_phase)}")

    def check_depth(self) -> None:
        if not self.verify:
            return
        depth = self.state.depth()
        if depth != self.model.autocast_depth:
            self.problem(f"TE's autocast depth is {depth}, the model's "
                         f"{self.model.autocast_depth}")

    def frame_contexts(self, reentrant: bool,
                       inputs_require_grad: bool = True) -> Tuple[Any, Any]:
        """TE's activation_recompute_forward for the original forward and for the recompute of
        one checkpoint frame, paired (the recompute finds the frame its forward opened).
        inputs_require_grad: False where a reentrant checkpoint's inputs need no grad (a batch
        fed straight in): it records no backward node, so it is never recomputed and reserves
        no backward-update ownership."""
        d = self.mods["distributed"]
        forward_ctx = d.activation_recompute_forward(activation_recompute=True,
                                                     recompute_phase=False)
        recompute_ctx = d.activation_recompute_forward(activation_recompute=True,
                                                       recompute_phase=True)
        forward_ctx._fp8audit_reentrant = reentrant
        forward_ctx._fp8audit_inputs_require_grad = inputs_require_grad
        forward_ctx._fp8audit_pair = recompute_ctx
        return forward_ctx, recompute_ctx

    def frame_gone(self, frame: int) -> None:
        """The frame's graph was freed: it can never be recomputed (a forward whose backward
        never ran, a backward that failed). Its stash is dropped."""
        with self.lock:
            if self.model is None:
                return
            self.model.abandon_frame(frame)
            self.safety.freed(frame)
            self.pending.discard(frame)
            if not self.model.frame_stash(frame):
                self.drop(frame)

    def drop(self, frame: int) -> None:
        """The frame's stash entries leave TE's buffer too."""
        for entry in self.stash.pop(frame, ()):
            entry.take()

    # ---- replacements --------------------------------------------------------------------------

    def build(self) -> List[Tuple[Any, str, Any]]:
        """(owner, name, new raw value) for every replacement; nothing is assigned here."""
        q = self.mods["quantization"]
        mlp = self.mods["module.layernorm_mlp"]
        mgr = q.FP8GlobalStateManager
        c = self
        orig = {t: _resolve(self.mods, t)[2] for t in _targets.REPLACED}

        def fn(target: str) -> Callable[..., Any]:
            raw = orig[target]
            return getattr(raw, "__func__", raw)

        autocast_enter = fn("quantization:FP8GlobalStateManager.autocast_enter")
        reduce_update = fn("quantization:FP8GlobalStateManager.reduce_and_update_fp8_tensors")
        copy_stash = fn("quantization:FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute")
        pop_stash = fn("quantization:FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute")
        reset = fn("quantization:FP8GlobalStateManager.reset")
        ckpt_forward = fn("distributed:_CheckpointFunction.forward")
        ckpt_backward = fn("distributed:_CheckpointFunction.backward")
        mlp_forward = fn("module.layernorm_mlp:_LayerNormMLP.forward")
        mlp_recompute = fn("module.layernorm_mlp:_LayerNormMLP._recompute")
        state = self.state

        def p_autocast_enter(cls, enabled=False, calibrating=False, fp8_recipe=None,
                             fp8_group=None, _graph=False):
            c.megatron_routing.adopt()  # Megatron's random.py completes after TE's import
            c.megatron_graphs.adopt()
            autocast_enter(cls, enabled, calibrating, fp8_recipe, fp8_group, _graph)
            delayed = _delayed_recipe(state.recipe()) and not _graph
            with c.lock:
                if c.model.autocast_depth == 0 and not c.model.recompute_phase:
                    c.safety.forward_begins()
                c.model.autocast_enter(bool(enabled), delayed, c.grad())
                c.check_depth()

        def p_autocast_exit(cls, enabled, _graph):
            with c.lock:
                state.leave_autocast()
                update = c.model.autocast_exit(False, c.grad())
                c.check_depth()
                c.collect()
                if c.model.autocast_depth == 0 and not c.model.recompute_phase:
                    c.safety.forward_ends()
            if update and not _graph:
                c.tls.approved_forward += 1
                cls.reduce_and_update_fp8_tensors(forward=True)

        def p_is_first_fp8_module(cls):
            if c.tls.replay is not None:
                return c.tls.replay
            # TE asks only where a backward node exists (grad was on at the module's entry; a
            # custom Function's forward itself runs with grad off).
            with c.lock:
                owns = c.model.take_ownership(c.tls.module, True)
                c.owners += owns
                if c.delayed_fp8() and not c.model.recompute_phase:
                    c.safety.asked(owns)
                return owns

        def p_reduce_and_update(cls, forward=True):
            if forward:
                if c.tls.approved_forward > 0:
                    c.tls.approved_forward -= 1
                    c.counts["forward"] += 1
                else:  # not an autocast exit's update (e.g. an optimizer's own): not ours
                    pass
            else:
                with c.lock:
                    c.counts["backward"] += 1
                    if c.owners > 0:
                        c.owners -= 1
                        c.model.owner_backward(UNATTRIBUTED)
                    else:
                        c.problem("a backward update ran that no module owned in the model")
            return reduce_update(cls, forward)

        def stash_transition(fp8_meta):
            with c.lock:
                mid = c.module_id(fp8_meta)
                c.tls.module = mid
                missing, popped, pushed = c.model.module_stash(mid, c.grad())
                if popped:
                    fifo = c.stash.get(popped)
                    if missing or not fifo or fifo[0].module != mid:
                        c.collect()
                        raise RuntimeError(
                            f"fp8audit.te: a module recomputes in checkpoint frame {popped} "
                            "without FP8 metadata stashed by its original forward (the recompute "
                            "diverged from the forward)")
                    entry = fifo.popleft()
                    # TE's restore pops the front of the module's FIFO: put the frame's entry
                    # there (a module stashed in several frames holds several entries).
                    entry.take()
                    buffers = state.recompute_buffers()
                    buffers[fp8_meta[STASH_KEY]].appendleft(entry.value)
                    pop_stash(mgr, fp8_meta)
                for frame in pushed:  # what the module runs with: after a restore, the stash
                    copy_stash(mgr, fp8_meta)
                    te_fifo = state.recompute_buffers()[fp8_meta[STASH_KEY]]
                    c.stash.setdefault(frame, collections.deque()).append(
                        _Entry(mid, te_fifo[-1], te_fifo))
                if c.verify:
                    for frame in pushed + ([popped] if popped else []):
                        n = len(c.stash.get(frame, ()))
                        if n != c.model.frame_stash(frame):
                            c.problem(f"frame {frame} holds {n} stashes, the model "
                                      f"{c.model.frame_stash(frame)}")
                c.collect()

        def p_copy_stash(cls, fp8_meta):
            if c.tls.mlp_private:
                return copy_stash(cls, fp8_meta)
            if not state.delayed(fp8_meta):
                return None
            stash_transition(fp8_meta)
            return None

        def p_pop_stash(cls, fp8_meta):
            if c.tls.mlp_private:
                return pop_stash(cls, fp8_meta)
            if not state.delayed(fp8_meta):
                return None
            stash_transition(fp8_meta)
            return None

        def p_reset(cls):
            reset(cls)
            state.after_reset()

        def p_enter(self):
            with c.lock:
                c.check_globals()
                if c.tls.skip_frame and not self.recompute_phase:
                    c.tls.skip_frame = False  # runs in the enclosing frame, as in TE 2.20
                    self._fp8audit_frame_entered = None
                    return None
                if not self.activation_recompute:
                    self._fp8audit_frame_entered = None
                    return None
                if not self.recompute_phase:
                    if state.graph_capturing():
                        raise NotCovered(GRAPH_CHECKPOINT)
                    pair = getattr(self, "_fp8audit_pair", None)
                    if pair is None and c.tls.pending_ctx is None and c.unpaired and (
                            c.delayed_fp8() or any(c.stash.get(f) for f in c.unpaired)):
                        # Opened directly (Megatron's CheckpointWithoutOutput): its recompute
                        # names no frame. One pending such frame pairs with the next recompute;
                        # with several, the order the recomputes come in is not known.
                        raise NotCovered(CHECKPOINT_WITHOUT_OUTPUT)
                    grad = c.grad()
                    # TE enters a reentrant frame inside its own no_grad; non-reentrant frames
                    # are entered under the caller's grad mode.
                    reentrant = getattr(self, "_fp8audit_reentrant", not grad)
                    needs = getattr(self, "_fp8audit_inputs_require_grad", True)
                    first = c.model.first_module
                    frame, _direct = c.model.checkpoint_enter(
                        reentrant, caller_grad=True if reentrant else grad,
                        inputs_require_grad=needs)
                    if not _direct:
                        c.safety.opened(frame, reentrant and first and not c.model.first_module)
                    owner = None  # the object whose lifetime is the frame's autograd graph
                    if pair is not None:
                        pair._fp8audit_frame = frame
                        owner = pair
                    elif c.tls.pending_ctx is not None:
                        owner = c.tls.pending_ctx
                        owner._fp8audit_frame = frame
                        c.tls.pending_ctx = None
                    else:
                        c.unpaired.append(frame)
                    if owner is not None and not _direct:
                        c.pending.add(frame)
                    if owner is not None:
                        try:
                            weakref.finalize(owner, c.frame_gone, frame)
                        except TypeError:  # not weak-referenceable: the frame stays known
                            pass
                else:
                    frame = getattr(self, "_fp8audit_frame", None)
                    if frame is None and c.tls.recompute_frame is not None:
                        frame, c.tls.recompute_frame = c.tls.recompute_frame, None
                    if frame is None and c.unpaired:
                        frame = c.unpaired.popleft()
                    if frame is None or not c.model.recompute_enter(frame):
                        why = "; ".join(c.model.take_violations()) or "no frame to recompute"
                        raise RuntimeError(f"fp8audit.te: a checkpoint recompute cannot start "
                                           f"({why})")
                    c.safety.recomputed(frame)
                    c.transactions.append((frame, list(c.stash.get(frame, ()))))
                    # A recompute may start inside LayerNormMLP's own backward recompute (a
                    # saved tensor unpacked there): the modules it runs are not that module's.
                    c.tls.outer.append((c.tls.replay, c.tls.mlp_private))
                    c.tls.replay, c.tls.mlp_private = None, False
                self._fp8audit_frame_entered = frame
                c.sync_globals()
                c.collect()
            return None

        def p_exit(self, *exc_details):
            failed = bool(exc_details and exc_details[0] is not None)
            frame = getattr(self, "_fp8audit_frame_entered", None)
            if frame is None:
                return None
            with c.lock:
                self._fp8audit_frame_entered = None
                if not self.recompute_phase:
                    c.model.checkpoint_exit(frame, failed)
                    if failed:  # never recomputed
                        c.drop(frame)
                        c.pending.discard(frame)
                        if frame in c.unpaired:
                            c.unpaired.remove(frame)
                else:
                    c.model.recompute_exit(frame, failed)
                    if c.tls.outer:
                        c.tls.replay, c.tls.mlp_private = c.tls.outer.pop()
                    tframe, saved = c.transactions.pop()
                    if failed:  # the frame's entries consumed by the failed recompute return
                        for entry in saved:
                            if not entry.held():
                                entry.fifo.append(entry.value)
                        c.stash[tframe] = collections.deque(saved)
                    else:
                        c.drop(frame)
                        c.pending.discard(frame)
                c.sync_globals()
                c.collect()
            return None

        def p_get_contexts():
            return c.frame_contexts(reentrant=False)

        def p_ckpt_forward(ctx, *args, **kwargs):
            skip = c.backports.skips_frame(ctx)
            previous = (c.tls.pending_ctx, c.tls.skip_frame)
            c.tls.pending_ctx, c.tls.skip_frame = (None, True) if skip else (ctx, False)
            try:
                outputs = ckpt_forward(ctx, *args, **kwargs)
            finally:
                c.tls.pending_ctx, c.tls.skip_frame = previous
            return _own_outputs(outputs, args[6:])

        def p_ckpt_backward(ctx, *args):
            previous = c.tls.recompute_frame
            c.tls.recompute_frame = getattr(ctx, "_fp8audit_frame", None)
            try:
                return ckpt_backward(ctx, *args)
            finally:
                c.tls.recompute_frame = previous

        def p_mlp_forward(ctx, *args):
            previous, c.tls.mlp_private = c.tls.mlp_private, True
            try:
                out = mlp_forward(ctx, *args)
            finally:
                c.tls.mlp_private = previous
            # checkpoint=True: the forward only snapshotted the autocast state; it takes part in
            # ownership here, like any module, and its backward recompute replays the decision.
            if ctx is not None and getattr(ctx, "checkpoint", False) and \
                    hasattr(ctx, "autocast_state") and not hasattr(ctx, "_fp8audit_owns"):
                fp8 = bool(getattr(ctx, "other_args", {}).get("fp8", False))
                needs_grad = any(getattr(a, "requires_grad", False) for a in args)
                ctx._fp8audit_owns = bool(fp8 and needs_grad and mgr.is_first_fp8_module())
            return out

        def p_mlp_recompute(ctx):
            previous = (c.tls.replay, c.tls.mlp_private)
            if getattr(ctx, "checkpoint", False):
                c.tls.replay = getattr(ctx, "_fp8audit_owns", False)
            c.tls.mlp_private = True
            try:
                return mlp_recompute(ctx)
            finally:
                c.tls.replay, c.tls.mlp_private = previous

        new = {
            "quantization:FP8GlobalStateManager.autocast_enter": classmethod(p_autocast_enter),
            "quantization:FP8GlobalStateManager.autocast_exit": classmethod(p_autocast_exit),
            "quantization:FP8GlobalStateManager.is_first_fp8_module":
                classmethod(p_is_first_fp8_module),
            "quantization:FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute":
                classmethod(p_copy_stash),
            "quantization:FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute":
                classmethod(p_pop_stash),
            "quantization:FP8GlobalStateManager.reduce_and_update_fp8_tensors":
                classmethod(p_reduce_and_update),
            "quantization:FP8GlobalStateManager.reset": classmethod(p_reset),
            "distributed:activation_recompute_forward.__enter__": p_enter,
            "distributed:activation_recompute_forward.__exit__": p_exit,
            "distributed:get_activation_recompute_contexts": p_get_contexts,
            "distributed:_CheckpointFunction.forward": staticmethod(p_ckpt_forward),
            "distributed:_CheckpointFunction.backward": staticmethod(p_ckpt_backward),
            "module.layernorm_mlp:_LayerNormMLP.forward": staticmethod(p_mlp_forward),
            "module.layernorm_mlp:_LayerNormMLP._recompute": staticmethod(p_mlp_recompute),
        }
        for raw_new in new.values():
            inner = getattr(raw_new, "__func__", raw_new)
            setattr(inner, "__fp8audit__", True)
        del mlp
        return [(_resolve(self.mods, t)[0], _resolve(self.mods, t)[1], new[t])
                for t in _targets.REPLACED]

    # ---- install / remove ----------------------------------------------------------------------

    def install(self) -> None:
        """Every step of the patch, in order; a failure at any step undoes the steps done so far,
        in reverse (each undo registered before its step runs, so a step that fails halfway is
        undone too), and TE, torch and Megatron are left as they were."""
        plan = self.build()
        undo: List[Callable[[], None]] = []
        try:
            applied: List[Tuple[Any, str, Any]] = []

            def restore_te() -> None:
                for owner, name, value in reversed(applied):
                    setattr(owner, name, value)

            undo.append(restore_te)
            for owner, name, value in plan:
                applied.append((owner, name, owner.__dict__[name] if isinstance(owner, type)
                                else getattr(owner, name)))
                setattr(owner, name, value)
            undo.append(self.backports.remove)
            self.backports.install()
            flag = self.te_flag()
            undo.append(lambda: self.state.release_flag(flag))
            self.state.own_flag(lambda: self.model.first_module)
            dist = self.mods["distributed"]
            saved = [(name, getattr(dist, name)) for name in self.release.recompute_globals]

            def restore_globals() -> None:
                for name, value in saved:
                    setattr(dist, name, value)

            undo.append(restore_globals)
            # Outside any autocast TE's flag is not used before the next depth-0 entry re-arms it.
            self.sync_globals()
            reason = _torch_ckpt.why_not()
            if reason is None:
                routing = self.torch_routing = _torch_ckpt.Routing(self)
                undo.append(routing.remove)
                routing.install()
            else:
                print(f"fp8audit.te: torch.utils.checkpoint left alone ({reason}): TE modules it "
                      "recomputes may run without FP8", file=sys.stderr)
            undo.append(self.megatron_routing.remove)
            self.megatron_routing.adopt()
            undo.append(self.megatron_graphs.remove)
            self.megatron_graphs.adopt()
            undo.append(self.ops_fusers.remove)
            self.ops_fusers.install()
        except BaseException:
            self.torch_routing = None
            for step in reversed(undo):
                try:
                    step()
                except Exception:  # the failure raised is the one that stopped the patch
                    pass
            raise
        self.originals = applied

    def te_flag(self) -> bool:
        """TE's first-module flag as TE holds it (read before the patch owns it)."""
        mgr = self.mods["quantization"].FP8GlobalStateManager
        if isinstance(self.state, _state_layouts.ClassAttributeState):
            return bool(mgr.IS_FIRST_FP8_MODULE)
        return bool(mgr.quantization_state.is_first_fp8_module)

    def remove(self) -> None:
        self.ops_fusers.remove()
        self.backports.remove()
        self.megatron_routing.remove()
        self.megatron_graphs.remove()
        if self.torch_routing is not None:
            self.torch_routing.remove()
            self.torch_routing = None
        self.state.release_flag(self.model.first_module)
        for owner, name, value in reversed(self.originals):
            setattr(owner, name, value)
        self.originals = []
