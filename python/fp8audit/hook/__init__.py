"""fp8audit's Python hook: named features that `fp8audit run` switches on in every Python process
of a job (torchrun / srun children included) through FP8AUDIT_PYHOOK=feature[,feature...] and a
sitecustomize.py put first on PYTHONPATH (hook/site/). A feature runs when a module it watches has
finished importing (never importing it itself), or at once if that module is already imported.

Features: te-fix — fp8audit.te.patch() when transformer_engine.pytorch is imported;
te-version — one NVTX mark `fp8audit.te te=<version>[ semantics=te-3456]` when transformer_engine
is imported (the agent records it as a TE_VERSION fact; the report models the run with the
semantics of that release, or with te-3456 where TE's code has TE PR #3456's scheduling);
te-count — wraps FP8GlobalStateManager.reduce_and_update_fp8_tensors (under TE PR #3456 also its
new name, the same function: update_names, and marks the outermost entry and exit of its
quantization_backward_scope: hook/scope.py) once, when transformer_engine.pytorch is imported,
in an NVTX range `fp8audit.te.update pass=forward|backward
count=N unfused=U` around each call that updates something: N autocast keys with amaxes to reduce
in that direction, U of them on TE's unfused path (NVTE_UNFUSED_FP8_UPDATE=1, or a callable
amax_compute_algo / scaling_factor_compute_algo). The agent records these as PYTHON_HOOK updates
(agent/src/hook_probe.h), each after a mark saying where in the job's code it happened
(hook/callsite.py). When TE's buffers cannot be read, a call counts as one update;
te-recompute — whether each TE module recomputed in backward runs in the FP8 state of its original
forward (hook/recompute.py: one NVTX mark per recompute), whether the recompute re-quantized
a weight cache its forward filled (hook/refresh.py: one mark per weight re-quantized), and
whether a module's DelayedScaling scales are out of reach of TE's update (hook/frozen.py: one
mark per module and state).
A feature that fails says so in one line on stderr, and to the agent in one NVTX mark
`fp8audit.te.unchecked check=<feature> reason=<exception class>` (unchecked(): the report then calls
the process's trace incomplete, never a pass); the job goes on without it. A check inside a feature
that gives up (te-recompute's recompute, refresh and frozen checks, te-count's scope marks) does
the same, with its own name."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from fp8audit import _nvtx
from fp8audit._markers import HOOK_TE_MARK, HOOK_UNCHECKED_MARK, HOOK_UPDATE_RANGE

ENV = "FP8AUDIT_PYHOOK"
_recording = True  # set_recording(False): te-count and te-recompute call straight through


def set_recording(on: bool) -> None:
    """Turns the armed features' recording off (False) and on (True) in this process, for
    benchmarks that alternate rounds with and without them (fp8audit._agent.set_recording); while
    off, te-count and te-recompute call TE straight through and send nothing."""
    global _recording
    _recording = bool(on)


def recording() -> bool:
    """Whether the armed features record (True unless set_recording(False))."""
    return _recording


_unchecked: set = set()  # (pid, check) of the unchecked marks sent
_given_up: Dict[str, str] = {}  # check -> reason token, of every unchecked mark sent or inherited


def unchecked(check: str, reason: str) -> None:
    """Tells the agent that the hook's check `check` ("recompute", "refresh", "frozen", "scope", or
    a feature's name) could not run in this process from now on: one NVTX mark
    `fp8audit.te.unchecked check=<check> reason=<reason>` per process and check (a forked child
    sends its own: its trace is another), which the report turns into an incomplete trace, never a
    pass. `reason`: a short token (an exception's class name; what is not a letter, digit, '.',
    '_' or '-' becomes '-'). Sent where the check gives up, beside its one line on stderr; never
    raises."""
    try:
        key = (os.getpid(), check)
        if key in _unchecked:
            return
        _unchecked.add(key)
        token = "".join(c if c.isalnum() or c in "._-" else "-" for c in reason)[:40] or "unknown"
        _given_up[check] = token
        _nvtx.mark(f"{HOOK_UNCHECKED_MARK} check={check} reason={token}")
    except Exception:  # a feature must never break the job
        pass


def _after_fork_in_child() -> None:
    """A forked child inherits its parent's checks given up, which never give up again in it, and
    records a trace of its own: it sends their marks again, so that its trace is incomplete too."""
    for check, token in list(_given_up.items()):
        unchecked(check, token)


os.register_at_fork(after_in_child=_after_fork_in_child)



def _te_fix(module: object) -> None:
    del module
    import fp8audit.te

    try:
        fp8audit.te.patch()
    except fp8audit.te.PatchRefused as e:
        _say(f"--fix-te: {e}; the job runs with Transformer Engine unpatched")


def scheduling_semantics() -> str:
    """The semantics a TE's own code shows, whatever its version says: PR_3456_SEMANTICS where TE's
    quantization module (already imported: TE's __init__ imports its PyTorch part first) has TE PR
    #3456's backward update at the end of each autograd task (docs/te-pr-3456.md); "" otherwise or
    where it is not imported."""
    from fp8audit._te_scheduling import PR_3456_SEMANTICS, has_pr_3456

    quantization = sys.modules.get("transformer_engine.pytorch.quantization")
    return PR_3456_SEMANTICS if quantization is not None and has_pr_3456(quantization) else ""


def _te_version(module: object) -> None:
    semantics = scheduling_semantics()
    _nvtx.mark(f"{HOOK_TE_MARK} te={getattr(module, '__version__', 'unknown')}" +
               (f" semantics={semantics}" if semantics else ""))


def _state_manager() -> Any:
    for name in ("transformer_engine.pytorch.quantization", "transformer_engine.pytorch.fp8"):
        try:
            manager = getattr(importlib.import_module(name), "FP8GlobalStateManager", None)
        except ImportError:
            continue
        if manager is not None:
            return manager
    raise RuntimeError("transformer_engine.pytorch has no FP8GlobalStateManager")


def pending_updates(manager: Any, forward: bool) -> Tuple[int, int]:
    """(updates, unfused ones) that reduce_and_update_fp8_tensors(forward) is about to make: the
    global amax buffers of that direction that hold amaxes (TE 2.x's layout); (1, 0) when the
    buffers cannot be read. Called at every autocast exit, so a call that finds nothing to update
    (every recipe but DelayedScaling) reads no more than the buffers."""
    try:
        state = getattr(manager, "quantization_state", None) or manager
        buffers = getattr(state, "global_amax_buffer", None)
        if buffers is None:
            return 1, 0
        split = getattr(manager, "split_key_in_buffer", None)
        keys = []
        for key, amaxes in buffers.items():
            if split is not None:
                key_forward, autocast_key = split(key)
            else:
                head, _, autocast_key = key.partition("_")
                key_forward = head == "forward"
            if bool(key_forward) == bool(forward) and len(amaxes) != 0:
                keys.append(autocast_key)
        if not keys:
            return 0, 0
        env_unfused = bool(int(os.getenv("NVTE_UNFUSED_FP8_UPDATE", "0") or "0"))
        arguments = getattr(state, "autocast_arguments", {}) or {}
        unfused = 0
        for autocast_key in keys:
            recipe = arguments.get(autocast_key)
            recipe = recipe[0] if isinstance(recipe, tuple) else recipe
            if env_unfused or callable(getattr(recipe, "amax_compute_algo", None)) or \
                    callable(getattr(recipe, "scaling_factor_compute_algo", None)):
                unfused += 1
        return len(keys), unfused
    except Exception:
        return 1, 0


UPDATE_NAMES = ("reduce_and_update_quantization_state",  # TE PR #3456's name, the one TE calls
                "reduce_and_update_fp8_tensors")  # before it, and its alias there


def update_names(manager: Any) -> Tuple[Any, List[str]]:
    """(the update function, the names of FP8GlobalStateManager that hold it): TE PR #3456 calls
    the update by its new name and keeps the old as the same classmethod, so a wrapper replaces
    both; a release without the new name has the old alone."""
    held = {name: getattr(manager.__dict__.get(name), "__func__", None) for name in UPDATE_NAMES}
    func = held[UPDATE_NAMES[0]] or held[UPDATE_NAMES[1]]
    if func is None:
        raise RuntimeError("FP8GlobalStateManager.reduce_and_update_fp8_tensors is not a "
                           "classmethod")
    return func, [name for name in UPDATE_NAMES if held[name] is func]


def _te_count(module: object) -> None:
    del module
    from fp8audit.hook import callsite
    manager = _state_manager()
    func, names = update_names(manager)
    if getattr(func, "__fp8audit_count__", False):
        return
    send = _nvtx.sender()  # the site's mark, resolved once: an update per autocast exit

    @functools.wraps(func)  # __wrapped__: fp8audit.te's fingerprints still see TE's source
    def counting(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if not _recording:
            return func(cls, *args, **kwargs)
        forward = bool(kwargs.get("forward", args[0] if args else True))
        count, unfused = pending_updates(cls, forward)
        if count == 0:
            return func(cls, *args, **kwargs)
        # Skipping the job's own wrappers of this function (a job that counts TE's updates).
        send(callsite.mark_text(callsite.user_site(sys._getframe(1), wrappers=True)))
        pushed = _nvtx.call("range_push",
                            f"{HOOK_UPDATE_RANGE} pass={'forward' if forward else 'backward'}"
                            f" count={count} unfused={unfused}")
        try:
            return func(cls, *args, **kwargs)
        finally:
            if pushed:
                _nvtx.call("range_pop")

    counting.__fp8audit_count__ = True  # type: ignore[attr-defined]
    wrapped = classmethod(counting)
    for name in names:
        setattr(manager, name, wrapped)
    _te_scope()


def _te_scope() -> None:
    """te-count's marks of TE PR #3456's quantization_backward_scope (hook/scope.py), where TE has
    it; a failure says one line and leaves the scope as TE made it (the counting stays)."""
    try:
        from fp8audit.hook import scope

        scope.install()
    except Exception as e:  # a feature must never break the job
        _say(f"python hook 'te-count' could not mark quantization_backward_scope "
             f"({type(e).__name__}: {e}); continuing without its marks")
        unchecked("scope", type(e).__name__)


def _te_recompute(module: object) -> None:
    del module
    from fp8audit.hook import recompute

    classes = []
    # te.ops: a Sequential, and an operation called on its own (its forward runs a fuser of its
    # own); operations inside a Sequential run through its fusers, never through their own call.
    for name, attr in (("transformer_engine.pytorch.module.base", "TransformerEngineBaseModule"),
                       ("transformer_engine.pytorch.ops", "Sequential"),
                       ("transformer_engine.pytorch.ops", "FusibleOperation")):
        cls = getattr(sys.modules.get(name), attr, None)  # imported by TE itself, never by us
        if isinstance(cls, type):
            classes.append(cls)
    if not classes:
        raise RuntimeError("transformer_engine.pytorch has no TransformerEngineBaseModule")
    attention = getattr(sys.modules.get("transformer_engine.pytorch"), "DotProductAttention", None)
    recompute.install(_state_manager(), tuple(classes),
                      (attention,) if isinstance(attention, type) else (),
                      sys.modules.get("transformer_engine.pytorch.distributed"))


# feature -> (watched module, action)
FEATURES: Dict[str, Tuple[str, Callable[[object], None]]] = {
    "te-fix": ("transformer_engine.pytorch", _te_fix),
    "te-version": ("transformer_engine", _te_version),
    "te-count": ("transformer_engine.pytorch", _te_count),
    "te-recompute": ("transformer_engine.pytorch", _te_recompute),
}

_pending: Dict[str, List[Tuple[str, Callable[[object], None]]]] = {}
_busy: set = set()
_armed: set = set()  # the features install() armed in this process


def _say(line: str) -> None:
    print(f"fp8audit: {line}", file=sys.stderr, flush=True)


def _run(name: str, action: Callable[[object], None], module: object) -> None:
    try:
        action(module)
    except Exception as e:  # a feature must never break the job
        _say(f"python hook '{name}' failed ({type(e).__name__}: {e}); continuing without it")
        unchecked(name, type(e).__name__)


class _Loader(importlib.abc.Loader):
    """Runs the watched module's own loader, then the features waiting for it."""

    def __init__(self, loader: importlib.abc.Loader, fullname: str) -> None:
        self._loader = loader
        self._fullname = fullname

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        spec = module.__spec__
        spec.loader = self._loader  # the module keeps its real loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        for name, action in _pending.pop(self._fullname, []):
            _run(name, action, module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending or fullname in _busy:
            return None
        _busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            return None
        finally:
            _busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec


_finder = _Finder()


def install(features: List[str]) -> List[str]:
    """Arms the named features, each once per process however often named (spaces around a name
    ignored); returns the names it did not know (reported on stderr)."""
    unknown = []
    for name in dict.fromkeys(n.strip() for n in features if n.strip()):
        if name not in FEATURES:
            unknown.append(name)
            continue
        if name in _armed:
            continue
        _armed.add(name)
        watched, action = FEATURES[name]
        if watched in sys.modules:
            _run(name, action, sys.modules[watched])
            continue
        _pending.setdefault(watched, []).append((name, action))
    if _pending and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    if unknown:
        _say(f"unknown python hook feature(s) {', '.join(unknown)} in {ENV} "
             f"(known: {', '.join(sorted(FEATURES))}); ignored")
    return unknown


def install_from_environment() -> None:
    """Arms the features FP8AUDIT_PYHOOK names (comma-separated; what `fp8audit run` sets), as
    install() does; none named: nothing."""
    names = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
    if names:
        install(names)
