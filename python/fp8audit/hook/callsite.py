"""Where in the job's own code an FP8 event happened: the innermost Python frame on the calling
thread's stack that is not PyTorch's, Transformer Engine's, fp8audit's or the standard library's.

The python hook sends it as one NVTX mark

    fp8audit.te.site site=<path>:<line> in <function>

(path: the file's last two components) right before the event it locates. Where a checkpoint's
recompute lies between the event and the job's code (an update at the exit of the autocast TE's
checkpoint opens around its recompute), the site is the checkpointed function's definition,
"<path>:<line> in <function> (checkpointed)". Empty where neither is on the stack, as in a
backward pass that PyTorch's autograd engine runs on its own thread. Sent before each
update that te-count brackets (a forward update at the exit of the autocast that opened it) and
each recompute that te-recompute finds in another FP8 state than its forward (the call of the
module). The agent records it as a CALL_SITE event; the report names the site in its
explanations. Walked only at those events, never at an ordinary module call."""

from __future__ import annotations

import functools
import sys
import types
from typing import Any, Dict, Optional, Tuple

from fp8audit._markers import HOOK_SITE_MARK

MARK = HOOK_SITE_MARK
LIMIT = 96  # characters of a site: the agent keeps 119 of a mark's text
_LIBRARIES = ("torch", "transformer_engine", "fp8audit", "torchvision", "triton", "importlib")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"contextlib", "functools"}


class _Libraries(Dict[str, bool]):
    """Module name -> whether its frames are skipped, decided on a module's first lookup: a seen
    module's `_library[name]` is one dictionary lookup, no Python call (the stack walks below ask
    it of every frame)."""

    def __missing__(self, module: str) -> bool:
        top = str(module).partition(".")[0]
        known = self[module] = top in _LIBRARIES or top in _STDLIB
        return known


_library = _Libraries()


def is_library(module: str) -> bool:
    """Whether frames of `module` (a frame's __name__) belong to a library rather than the job."""
    return _library[module]


def short_path(filename: str) -> str:
    """A file's last two path components ("models/llama.py")."""
    parts = filename.replace("\\", "/").rsplit("/", 2)
    return "/".join(parts[-2:])


# Where a recompute comes from: (suffix of a frame's file name, the checkpoint it names).
CHECKPOINTS: Tuple[Tuple[str, str], ...] = (
    ("transformer_engine/pytorch/distributed.py", "te.distributed.checkpoint"),
    ("megatron/core/tensor_parallel/random.py", "megatron.tensor_parallel.checkpoint"),
    ("torch/utils/checkpoint.py", "torch.utils.checkpoint"),
)
_CHECKPOINT_FILES = tuple(suffix for suffix, _ in CHECKPOINTS)
# Where a checkpoint's frame keeps the function it recomputes: ctx.run_function (reentrant
# checkpoints), a closure's `fn` (torch's non-reentrant) or `function` (TE's non-reentrant).
_RECOMPUTED = ("run_function", "function", "fn")


def _cut(site: str) -> str:
    return site if len(site) <= LIMIT else "..." + site[len(site) - LIMIT + 3:]


def _code_of(target: Any) -> Optional[Any]:
    """The code object a checkpoint recomputes through `target` (a function, a bound method, a
    functools.partial, a module, whose forward, or another callable object, whose __call__), where
    it is the job's own; else None."""
    for _ in range(4):  # asked of the type: an object's __getattr__ may raise for each miss
        kind = type(target)
        if isinstance(target, functools.partial):
            target = target.func
        elif hasattr(kind, "__func__"):  # a bound method
            target = target.__func__
        elif hasattr(kind, "__code__"):  # a function
            break
        elif callable(getattr(kind, "forward", None)):
            target = kind.forward
        elif isinstance(getattr(kind, "__call__", None), types.FunctionType):
            target = kind.__call__
        else:
            return None
    code = getattr(target, "__code__", None) if hasattr(type(target), "__code__") else None
    if code is None or is_library(str(getattr(target, "__module__", "") or "")):
        return None
    return code


def checkpointed(frame: Any) -> str:
    """The function a known checkpoint's `frame` recomputes, "path:line in name (checkpointed)";
    "" where it keeps none of the job's own."""
    names = frame.f_locals
    ctx = names.get("ctx")
    for key in ("ctx.run_function", *_RECOMPUTED):
        try:  # the job's objects may fail to be read in any way: no site from them, never an error
            target = getattr(ctx, "run_function", None) if key == "ctx.run_function" else \
                names.get(key)
            code = _code_of(target) if target is not None else None
        except Exception:
            code = None
        if code is not None:
            name = getattr(code, "co_qualname", code.co_name)
            return f"{short_path(code.co_filename)}:{code.co_firstlineno} in {name} (checkpointed)"
    return ""


def _past_wrappers(frame: Any) -> Any:
    """The first library frame at or beyond `frame` where it is Transformer Engine's: the job's
    frames before it wrap the hooked function itself (a job counting TE's updates); else `frame`
    (the job called the function directly, or runpy ran the job)."""
    start = frame
    while frame is not None and not _library[frame.f_globals.get("__name__", "")]:
        frame = frame.f_back
    module = str(frame.f_globals.get("__name__", "")) if frame is not None else ""
    if module.partition(".")[0] != "transformer_engine":
        return start
    return frame


def user_site(frame: Optional[Any] = None, wrappers: bool = False) -> str:
    """Where the event at `frame` (default: the caller's) happened in the job's code: its innermost
    frame of the job's own as "path:line in function", or the function a checkpoint's recompute
    between them runs (checkpointed()); cut to LIMIT characters from the left; "" for neither.
    `wrappers`: `frame` is the hooked function's caller, and the job's frames there, before any
    library's, wrap that function rather than lead to it: they are skipped."""
    frame = frame if frame is not None else sys._getframe(1)
    try:  # read from the job's objects: a site that cannot be read is none, never an error
        return _walk(_past_wrappers(frame) if wrappers else frame)
    except Exception:
        return ""


def _walk(frame: Any) -> str:
    """user_site()'s walk from `frame` outwards."""
    while frame is not None:
        if not _library[frame.f_globals.get("__name__", "")]:
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)
            return _cut(f"{short_path(code.co_filename)}:{frame.f_lineno} in {name}")
        if frame.f_code.co_filename.replace("\\", "/").endswith(_CHECKPOINT_FILES):
            site = checkpointed(frame)
            if site:
                return _cut(site)
        frame = frame.f_back
    return ""


def mark_text(site: str) -> str:
    """The NVTX mark that locates the next event of this thread at `site` ("" for none)."""
    return f"{MARK} site={site}"
