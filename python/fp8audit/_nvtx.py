"""The NVTX calls of fp8audit's Python hook and fp8audit.te (marks and ranges the agent records):
torch.cuda.nvtx where CUDA is available, or the functions a test puts in NVTX. NVTX is optional:
a call that fails returns False and never fails the job."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from fp8audit import _markers

# The NVTX functions used (range_push, range_pop, mark); None: torch.cuda.nvtx. Tests set it.
NVTX: Optional[Any] = None
_broken = False
_torch_nvtx: Optional[Any] = None  # torch.cuda.nvtx, once CUDA was found available
_no_cuda = False  # CUDA was found unavailable: no more asking torch (a call per mark otherwise)


def _functions() -> Optional[Any]:
    global _torch_nvtx, _no_cuda
    if NVTX is not None:
        return NVTX
    if _broken:
        return None
    if _torch_nvtx is not None or _no_cuda:
        return _torch_nvtx
    try:
        import torch

        if torch.cuda.is_available():
            _torch_nvtx = torch.cuda.nvtx
        else:
            _no_cuda = True
        return _torch_nvtx
    except Exception:
        return None


def call(name: str, *args: Any) -> bool:
    """One NVTX call; False (and no more tries with torch's) when it fails."""
    global _broken
    nvtx = _functions()
    if nvtx is None:
        return False
    try:
        getattr(nvtx, name)(*args)
        return True
    except Exception:  # NVTX is optional: never fail the job for it
        if NVTX is None:
            _broken = True
        return False


def mark(message: str) -> None:
    """An NVTX mark (the agent receives marks of every domain): torch's where CUDA is available,
    else libfp8audit_markers.so's (a CPU torch), so the agent hears the hook either way."""
    if call("mark", message) or NVTX is not None:
        return
    lib = _markers.library()
    if lib is not None:
        try:
            lib.fp8audit_markers_mark(message.encode("utf-8", "replace"))
        except Exception:  # NVTX is optional: never fail the job for it
            pass


def sender() -> Callable[[str], None]:
    """mark(), resolved once for a caller that marks often (the hook's check of every module call):
    the mark function of the route mark() takes now, called directly (torch's NVTX, or
    libfp8audit_markers.so's), else mark() itself. A mark that fails there goes through mark(),
    which handles the failure, as does every later one: the direct route is not tried again."""
    if NVTX is not None:
        return mark
    nvtx = _functions()
    if nvtx is not None:
        raw = getattr(getattr(nvtx, "_nvtx", None), "markA", None)
        if not callable(raw):
            return mark
        direct: Callable[[str], None] = raw
    else:
        lib = _markers.library()
        if lib is None:
            return mark
        native = lib.fp8audit_markers_mark

        def direct(message: str) -> None:
            native(message.encode("utf-8", "replace"))

    route: List[Callable[[str], None]] = [direct]

    def send(message: str) -> None:
        try:
            route[0](message)
        except Exception:  # NVTX is optional: never fail the job for it
            route[0] = mark
            mark(message)

    return send
