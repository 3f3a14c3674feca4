"""Runs state/ scenarios (their JSON form) and fixed layouts on a TE-like package: real torch
autograd, real checkpointing, counting reduce_and_update_fp8_tensors calls per microbatch. Used by
the CPU tests on the stand-in (tests/python) and by te_fix.py on the GPU with real TE."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, List, Tuple

import torch
import torch.utils.checkpoint


def global_state(manager: Any) -> Any:
    """TE's global FP8 state: FP8GlobalStateManager.quantization_state (TE 2.15 on), else the
    manager itself, whose class attributes hold the buffers by the same names (TE 2.9-2.14)."""
    return getattr(manager, "quantization_state", manager)


class Injected(RuntimeError):
    """An exception a scenario's `fail` op raises."""


class Counter:
    """Counts TE's DelayedScaling updates per direction around reduce_and_update_fp8_tensors.
    With track_state it also counts the updates that advanced state: calls after which some
    module's amax history or scale of that direction differs from before (TE's update kernel
    leaves a history alone when no amax arrived since its last update)."""

    def __init__(self, manager: Any, track_state: bool = False) -> None:
        self.manager = manager
        self.counts = {"forward": 0, "backward": 0}
        self.advancing = {"forward": 0, "backward": 0}
        self.track_state = track_state
        # TE PR #3456 calls the update by its new name, the old one the same classmethod: both
        # are wrapped (reduce_and_update_fp8_tensors alone before it).
        self._original = manager.__dict__["reduce_and_update_fp8_tensors"]
        self._names = [n for n in ("reduce_and_update_quantization_state",
                                   "reduce_and_update_fp8_tensors")
                       if manager.__dict__.get(n) is self._original]
        counter = self

        def counting(cls, forward: bool = True):
            # A call with no DelayedScaling buffer of its direction is a no-op (TE calls it for
            # every recipe); count the updates, as the agent and the model do.
            prefix = "forward" if forward else "backward"
            qstate = global_state(cls)
            keys = [k for k, v in qstate.global_amax_history_buffer.items()
                    if k.startswith(prefix) and v]
            if not keys:
                return counter._original.__func__(cls, forward)
            counter.counts[prefix] += 1
            if not counter.track_state:
                return counter._original.__func__(cls, forward)
            before = counter._state(qstate, keys)
            result = counter._original.__func__(cls, forward)
            after = counter._state(qstate, keys)
            if len(before) != len(after) or any(
                    a.shape != b.shape or not torch.equal(a, b) for a, b in zip(before, after)):
                counter.advancing[prefix] += 1
            return result

        for name in self._names:
            setattr(manager, name, classmethod(counting))

    @staticmethod
    def _state(qstate: Any, keys: List[str]) -> List[torch.Tensor]:
        out = []
        for key in keys:
            out += [t.detach().clone() for t in qstate.global_amax_history_buffer.get(key, [])]
            out += [t.detach().clone() for t in qstate.global_scale_buffer.get(key, [])]
        return out

    def _modules(self, prefix: str) -> List[List[torch.Tensor]]:
        qstate = global_state(self.manager)
        modules: List[List[torch.Tensor]] = []
        for key, histories in qstate.global_amax_history_buffer.items():
            if key.startswith(prefix):
                scales = qstate.global_scale_buffer.get(key, [])
                modules += [[h.detach().clone(), s.detach().clone()]
                            for h, s in zip(histories, scales)]
        return modules

    def forget(self) -> None:
        """A new run (TE's buffers were reset): no module has moved yet."""
        self._marked: Dict[str, List[List[torch.Tensor]]] = {}
        self._moved: Dict[str, set] = {"forward": set(), "backward": set()}
        self._cold = {"forward": 0, "backward": 0}

    def mark(self) -> None:
        """Starts a microbatch for silent() (track_state)."""
        if not hasattr(self, "_moved"):
            self.forget()
        self._marked = {p: self._modules(p) for p in ("forward", "backward")}

    def silent(self) -> Tuple[Tuple[int, int], Tuple[int, int]]:
        """Per direction, over the microbatch since mark(): the modules that no update moved, and
        the modules that had never moved before it (cold: their scale is still TE's initial one).
        TE's update kernel rolls a history only when its pending amax is nonzero, and a gradient
        quantized at a cold module's scale can underflow to a zero amax for the module before it,
        so the model's harmful count is exact only where a direction has neither. A module
        registered since mark() is cold, and silent while its history is all zero."""
        silent, cold = [], []
        for prefix in ("forward", "backward"):
            before = self._marked.get(prefix, [])
            moved = self._moved[prefix]
            now = self._modules(prefix)
            silent_count = cold_count = 0
            for i, (history, scale) in enumerate(now):
                cold_count += i not in moved
                if i < len(before):
                    still = torch.equal(history, before[i][0]) and torch.equal(scale, before[i][1])
                else:
                    still = not bool(history.any())
                silent_count += still
                if not still:
                    moved.add(i)
            silent.append(silent_count)
            cold.append(cold_count)
        return (silent[0], silent[1]), (cold[0], cold[1])

    def take(self) -> Tuple[int, int]:
        out = (self.counts["forward"], self.counts["backward"])
        self.counts["forward"] = self.counts["backward"] = 0
        return out

    def take_advancing(self) -> Tuple[int, int]:
        """Updates that advanced state since the last call (track_state)."""
        out = (self.advancing["forward"], self.advancing["backward"])
        self.advancing["forward"] = self.advancing["backward"] = 0
        return out

    def remove(self) -> None:
        for name in self._names:
            setattr(self.manager, name, self._original)


def make_module(te: Any, kind: str, hidden: int) -> torch.nn.Module:
    if kind == "LAYERNORM_LINEAR":
        return te.LayerNormLinear(hidden, hidden)
    if kind == "LAYERNORM_MLP":
        return te.LayerNormMLP(hidden, 2 * hidden)
    if kind == "LAYERNORM_MLP_CHECKPOINT":
        return te.LayerNormMLP(hidden, 2 * hidden, checkpoint=True)
    return te.Linear(hidden, hidden)


class ScenarioRun:
    """One scenario (protobuf JSON of fp8audit.v1.Scenario) on `te`."""

    def __init__(self, te: Any, recipe_mod: Any, scenario_json: str, hidden: int = 16,
                 tokens: int = 8, device: str = "cpu") -> None:
        self.device = device
        self.te = te
        self.recipes = recipe_mod
        self.sc: Dict[str, Any] = json.loads(scenario_json)
        self.hidden, self.tokens = hidden, tokens
        torch.manual_seed(0)
        self.modules = {m["name"]: make_module(te, m.get("kind", "LINEAR"), hidden).to(device)
                        for m in self.sc.get("modules", [])}
        for m in self.sc.get("modules", []):
            if m.get("frozen"):
                for p in self.modules[m["name"]].parameters():
                    p.requires_grad_(False)
        self.default_delayed = self.sc.get("recipe", {}).get("kind") != "CURRENT_SCALING"
        self.backward_inside = self.sc.get("backward") == "INSIDE_AUTOCAST"
        self.has_backward_op = '"backward"' in json.dumps(self.sc.get("program", []))
        self.mb = 0
        self.depth = 0
        self.errors: List[str] = []
        # Graph cuts at schedule nodes' ends, in forward order: (the tensor before the cut, the
        # detached leaf after it); the backward runs one backward() per piece between them.
        self.cuts: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def recipe(self, delayed: bool) -> Any:
        return self.recipes.DelayedScaling() if delayed else self.recipes.Float8CurrentScaling()

    def fires(self, fail: Dict[str, Any]) -> bool:
        mbs = fail.get("microbatches")
        return not mbs or self.mb in mbs

    def run(self, ops: List[Dict[str, Any]], x: torch.Tensor, recompute: bool,
            top: bool) -> torch.Tensor:
        for op in ops:
            x = self.one(op, x, recompute, top)
        return x

    def backward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            (x.float() * x.float()).mean().backward()
        # Schedule nodes: each piece's own backward() (a node's run_backward), last to first, fed
        # the gradient its detached leaf received.
        cuts, self.cuts = self.cuts, []
        for before, leaf in reversed(cuts):
            if leaf.grad is not None:
                torch.autograd.backward(before, leaf.grad)
        return x.detach().requires_grad_(not self.sc.get("input_no_grad", False))

    def cut(self, x: torch.Tensor) -> torch.Tensor:
        if x.grad_fn is None:  # a leaf (or no graph): nothing recorded to cut off
            return x
        leaf = x.detach().requires_grad_(x.requires_grad)
        self.cuts.append((x, leaf))
        return leaf

    def one(self, op: Dict[str, Any], x: torch.Tensor, recompute: bool, top: bool):
        te = self.te
        if "call" in op:
            return self.modules[op["call"]["module"]](x)
        if "autocast" in op:
            a = op["autocast"]
            delayed = (a["recipe"].get("kind") != "CURRENT_SCALING" if "recipe" in a
                       else self.default_delayed)
            self.depth += 1
            try:
                with te.autocast(enabled=not a.get("disabled", False), recipe=self.recipe(delayed)):
                    x = self.run(a.get("body", []), x, recompute, top)
                    if (top and self.backward_inside and not self.has_backward_op
                            and self.depth == 1):
                        x = self.backward(x)
            finally:
                self.depth -= 1
            return x
        if "checkpoint" in op:
            c = op["checkpoint"]
            calls = {"n": 0}

            def body(t: torch.Tensor) -> torch.Tensor:
                calls["n"] += 1
                return self.run(c.get("body", []), t, calls["n"] > 1 or recompute, False)

            if c.get("torch"):  # torch.utils.checkpoint(use_reentrant=True): kind is REENTRANT
                return torch.utils.checkpoint.checkpoint(body, x, use_reentrant=True)
            return te.checkpoint(body, x, use_reentrant=c.get("kind") != "NON_REENTRANT")
        if "grad_mode" in op:
            g = op["grad_mode"]
            with torch.set_grad_enabled(g.get("enabled", False)):
                y = self.run(g.get("body", []), x, recompute, top)
            return y if g.get("enabled", False) else x
        if "fail" in op:
            f = op["fail"]
            where = f.get("where", "ORIGINAL_FORWARD")
            here = recompute if where in ("RECOMPUTE", "RECOMPUTE_ENTRY") else not recompute
            if here and self.fires(f):
                raise Injected(f"{where} in microbatch {self.mb}")
            return x
        if "try" in op:
            try:
                return self.run(op["try"].get("body", []), x, recompute, top)
            except Injected:
                return x
        if "backward" in op:
            return self.backward(x)
        if "backward_scope" in op:
            # TE PR #3456's scope where TE has it; else nullcontext, as Megatron-LM PR #7051 does.
            scope = getattr(te, "quantization_backward_scope", None)
            with scope() if scope is not None else contextlib.nullcontext():
                return self.run(op["backward_scope"].get("body", []), x, recompute, top)
        if "schedule_node" in op:
            # Megatron's ScheduleNode: input and output detached (requiring grad as before).
            y = self.run(op["schedule_node"].get("body", []), self.cut(x), recompute, False)
            return self.cut(y)
        if "repeat" in op:
            for _ in range(op["repeat"].get("count", 0)):
                x = self.run(op["repeat"].get("body", []), x, recompute, top)
            return x
        raise ValueError(f"unknown op {op}")

    def microbatch(self) -> bool:
        """One microbatch; False when an exception escaped it."""
        for m in self.sc.get("modules", []):
            self.modules[m["name"]].train(not m.get("eval", False))
        x = torch.randn(self.tokens, self.hidden, device=self.device,
                        requires_grad=not self.sc.get("input_no_grad", False))
        self.cuts = []
        try:
            y = self.run(self.sc.get("program", []), x, False, True)
            for change in self.sc.get("after_forward", []):
                self.modules[change["module"]].train(not change.get("eval", False))
            if not self.has_backward_op and not self.backward_inside:
                self.backward(y)
        except Exception as e:  # an injected failure, or TE's own error it caused
            self.errors.append(f"microbatch {self.mb}: {type(e).__name__}: {e}")
            return False
        return True

    def counts(self, counter: Counter, microbatches: int = 0) -> List[Tuple[int, int]]:
        out = []
        n = microbatches or self.sc.get("microbatches", 1)
        for self.mb in range(n):
            counter.take()
            self.microbatch()
            out.append(counter.take())
        return out
