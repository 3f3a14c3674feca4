"""The agent as seen from inside a process it was preloaded into (`fp8audit run`): whether it is
there, and fp8audit_flush(), which writes what it has recorded so far to this process's trace."""

from __future__ import annotations

import ctypes
from typing import Any, Optional


class AgentError(RuntimeError):
    """The agent is preloaded but cannot write its trace (disabled, or it failed to start)."""


def _flush_function() -> Optional[Any]:
    try:
        function = ctypes.CDLL(None).fp8audit_flush  # LD_PRELOAD-ed: in the global scope
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def loaded() -> bool:
    """True when libfp8audit.so is preloaded into this process."""
    return _flush_function() is not None


def flush() -> Optional[str]:
    """Writes every event recorded so far (all threads) to this process's trace and returns the
    trace's path; None when nothing was recorded yet (no trace). Raises AgentError when the agent
    is not loaded or cannot write."""
    function = _flush_function()
    if function is None:
        raise AgentError("fp8audit's agent is not loaded in this process (run it under "
                         "`fp8audit run`)")
    buffer = ctypes.create_string_buffer(4096)
    rc = function(buffer, len(buffer))
    if rc < 0:
        raise AgentError("fp8audit's agent is not recording in this process (disabled with "
                         "FP8AUDIT_DISABLE=1, or it could not start: see its line on stderr)")
    return buffer.value.decode("utf-8", "surrogateescape") if rc > 0 else None


def set_recording(on: bool, hook: Optional[bool] = None) -> bool:
    """Turns what the agent records in this process off (False) and on (True), for benchmarks
    that alternate rounds with and without it in one process: the agent's launch and TE-call
    probes (fp8audit_set_launch_probe) and the Python hook's features. Updates made while it is
    off are not recorded, so the audit of such a run reports them missing. Returns whether the
    agent's probes were switched (False: not loaded, or no probe attached; the hook still is).
    hook: the Python hook's recording when it should differ from the probes' (benchmarks that
    tell the two apart)."""
    from fp8audit import hook as python_hook

    python_hook.set_recording(on if hook is None else hook)
    try:
        function = ctypes.CDLL(None).fp8audit_set_launch_probe
    except (OSError, AttributeError):
        return False
    function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
    return function(1 if on else 0) == 0
