"""Markers the fp8audit agent reads: logical microbatches, optimizer steps and FP8 state updates
the agent cannot see as kernel launches. Never raises and never imports torch.

Route (chosen per call; a range is closed through the route that opened it):
  torch    torch.cuda.nvtx, when torch is already imported and CUDA is available (as the one-line
           marker of docs/usage.md does on a GPU);
  library  libfp8audit_markers.so (python/native/markers.cc, ctypes), which NVTX routes to the
           agent through NVTX_INJECTION64_PATH, set by `fp8audit run`: works with a CPU torch or
           no torch. Update events always take this route (they need the fp8audit NVTX domain);
  none     neither is available: nothing is marked; under `fp8audit run` one line says so."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from types import TracebackType
from typing import Any, Optional, Type

from fp8audit import _paths

LIBRARY = "libfp8audit_markers.so"
ABI = 3
# The NVTX grammar's names (proto/fp8audit/nvtx_grammar.h), Python's one spelling of each.
RANGE = "fp8audit.microbatch"  # the agent's default (FP8AUDIT_MICROBATCH_RANGE)
STEP = "fp8audit.step"  # the agent's default (FP8AUDIT_STEP_MARK)
HOOK_TE_MARK = "fp8audit.te"  # "fp8audit.te te=<version>": TE was imported
HOOK_UPDATE_RANGE = "fp8audit.te.update"  # around reduce_and_update_fp8_tensors
HOOK_RECOMPUTE_MARK = "fp8audit.te.recompute"  # a TE module recomputed in backward
HOOK_LOST_MARK = "fp8audit.te.lost"  # fp8audit.te's safety net: the fix lost a backward update
HOOK_UNCHECKED_MARK = "fp8audit.te.unchecked"  # check=<c> reason=<r>: a hook check could not run
HOOK_SITE_MARK = "fp8audit.te.site"  # where in the job's code the next hook event happened
HOOK_RECIPE_MARK = "fp8audit.te.recipe"  # a TE module ran under a recipe of a new class
HOOK_REFRESH_MARK = "fp8audit.te.refresh"  # a recompute re-quantized a cached FP8 weight
HOOK_FROZEN_MARK = "fp8audit.te.frozen"  # a module's DelayedScaling scales are never updated
HOOK_SCOPE_MARK = "fp8audit.te.scope"  # TE PR #3456's backward scope: at=enter|exit

_lib: Optional[ctypes.CDLL] = None
_lib_tried = False
_lib_lock = threading.Lock()
_torch_nvtx: Optional[Any] = None
_torch_checked = False
_warned = False


def _say_once(what: str) -> None:
    global _warned
    if _warned or not os.environ.get("NVTX_INJECTION64_PATH"):
        return  # not under an NVTX tool: nobody is listening
    _warned = True
    try:
        places = _paths.looked_at("lib", LIBRARY, "FP8AUDIT_MARKERS_LIB")
        print(f"fp8audit: {what} not marked: neither {LIBRARY} (looked at {places}) nor torch's "
              "CUDA NVTX is available", file=sys.stderr, flush=True)
    except Exception:  # stderr closed, or anything else: the job goes on
        pass


def library() -> Optional[ctypes.CDLL]:
    """libfp8audit_markers.so, loaded once; None where it is missing or unusable. A thread that
    asks while another loads it waits for that load (its calls release the GIL)."""
    global _lib, _lib_tried
    if _lib_tried:
        return _lib
    with _lib_lock:
        if not _lib_tried:
            _lib = _load()
            _lib_tried = True
    return _lib


def _load() -> Optional[ctypes.CDLL]:
    path = _paths.find("lib", LIBRARY, "FP8AUDIT_MARKERS_LIB")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(str(path))
        lib.fp8audit_markers_abi.restype = ctypes.c_int
        if lib.fp8audit_markers_abi() != ABI:
            return None
        lib.fp8audit_markers_update.argtypes = [ctypes.c_int, ctypes.c_uint64]
        lib.fp8audit_markers_microbatch_begin_id.argtypes = [ctypes.c_uint64]
        lib.fp8audit_markers_mark.argtypes = [ctypes.c_char_p]
        for name in ("microbatch_begin", "microbatch_begin_id", "microbatch_end", "step",
                     "update", "mark"):
            getattr(lib, f"fp8audit_markers_{name}").restype = None
    except (OSError, AttributeError):
        return None
    return lib


def _torch() -> Optional[Any]:
    """torch.cuda.nvtx when torch is imported and has CUDA (decided once torch is seen)."""
    global _torch_nvtx, _torch_checked
    if _torch_checked:
        return _torch_nvtx
    torch = sys.modules.get("torch")
    if torch is None:
        return None  # never imported here; asked again at the next call
    _torch_checked = True
    try:
        if torch.cuda.is_available():
            _torch_nvtx = torch.cuda.nvtx
    except Exception:
        _torch_nvtx = None
    return _torch_nvtx


def _torch_failed() -> None:
    global _torch_nvtx
    _torch_nvtx = None  # e.g. "NVTX functions not installed": the library from now on


class microbatch(contextlib.ContextDecorator):
    """Marks one logical microbatch: `with fp8audit.microbatch(): ...` (or as a decorator). The
    NVTX range `fp8audit.microbatch` on the calling thread, which the agent reads as the
    microbatch's bounds. With `id` (an int >= 0) the range names its logical microbatch
    (`fp8audit.microbatch id=7`): every range with the same id counts in one microbatch, so a
    pipeline schedule marks a microbatch's forward and, later, its backward apart (ids may be
    used again once a microbatch's backward range has ended). Raises ValueError for an id that is
    not a non-negative int; otherwise never raises, and exceptions of the body pass through
    unchanged."""

    def __init__(self, id: Optional[int] = None) -> None:
        if id is not None and (not isinstance(id, int) or isinstance(id, bool) or
                               not 0 <= id < 2**64):
            raise ValueError(f"microbatch id must be an int in [0, 2**64), not {id!r}")
        self._id = id
        self._route: Optional[str] = None

    def __enter__(self) -> "microbatch":
        self._route = None
        nvtx = _torch()
        if nvtx is not None:
            try:
                nvtx.range_push(RANGE if self._id is None else f"{RANGE} id={self._id}")
                self._route = "torch"
                return self
            except Exception:
                _torch_failed()
        lib = library()
        if lib is not None:
            try:
                if self._id is None:
                    lib.fp8audit_markers_microbatch_begin()
                else:
                    lib.fp8audit_markers_microbatch_begin_id(self._id)
                self._route = "library"
            except Exception:
                pass
        if self._route is None:
            _say_once("fp8audit.microbatch():")
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        route, self._route = self._route, None
        try:
            if route == "torch" and _torch_nvtx is not None:
                _torch_nvtx.range_pop()
            elif route == "library" and _lib is not None:
                _lib.fp8audit_markers_microbatch_end()
        except Exception:
            pass  # an exception of the block goes on (None: not swallowed)


def step() -> None:
    """Marks an optimizer step (`fp8audit.step`). Never raises."""
    nvtx = _torch()
    if nvtx is not None:
        try:
            nvtx.mark(STEP)
            return
        except Exception:
            _torch_failed()
    lib = library()
    try:
        if lib is not None:
            lib.fp8audit_markers_step()
            return
    except Exception:
        pass
    _say_once("fp8audit.step():")


_DIRECTIONS = {"forward": 1, "backward": -1, None: 0}


def update(direction: Optional[str] = None, count: int = 1) -> None:
    """Tells the agent about `count` global FP8 state updates it cannot see as an update-kernel
    launch (e.g. computed on the CPU): `update.forward` / `update.backward` / `update` in the
    fp8audit NVTX domain (agent/include/fp8audit/nvtx_events.h). Do not announce an update whose
    kernel the agent classifies (it would count twice). Raises ValueError for a direction other
    than "forward", "backward" or None; otherwise never raises."""
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be 'forward', 'backward' or None, not {direction!r}")
    if count <= 0:
        return
    lib = library()
    try:
        if lib is not None:
            lib.fp8audit_markers_update(_DIRECTIONS[direction], count)
            return
    except Exception:
        pass
    _say_once("fp8audit update event")
