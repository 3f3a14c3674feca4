"""fp8audit.te's lifecycle: patch() (all or nothing, after the gate), unpatch(), patched(),
active(); the process marked as patched for its children and the agent."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Dict, Iterator, Optional

from . import _state_layouts, releases
from ._gate import check, te_modules, te_version
from ._model import ModelUnavailable
from ._patch import Controller, PatchRefused


_lock = threading.Lock()
_active: Optional[Controller] = None
# The patch a patched() block applied and could not remove at its end (a checkpoint awaiting its
# recompute): the end of the next patched() block removes it, unless patch() made it the caller's.
_left: Optional[Controller] = None


def _open_scope(mods: Dict[str, Any], release: releases.Release) -> Optional[str]:
    d = mods["distributed"]
    depth = _state_layouts.for_release(release.state_layout, mods["quantization"]).depth()
    if depth:
        return f"an FP8 autocast is open (depth {depth})"
    if any(getattr(d, name, False) for name in release.recompute_globals):
        return "a checkpoint (activation recompute region) is open"
    return None


def patch(verify: Optional[bool] = None) -> Controller:
    """Applies the fixed ownership to the installed TE (all or nothing); raises PatchRefused with
    one line when it cannot. verify (default: FP8AUDIT_TE_VERIFY=1): raise VerifyError at the first
    difference between what TE did and the model. Patching twice returns the active patch."""
    global _left
    controller = _apply(verify)
    _left = None  # the caller's now, even where a patched() block left it in force
    return controller


def _apply(verify: Optional[bool]) -> Controller:
    global _active
    if verify is None:
        verify = os.environ.get("FP8AUDIT_TE_VERIFY", "") == "1"
    with _lock:
        if _active is not None:
            _active.verify = bool(verify)
            return _active
        try:
            mods = te_modules()
        except ImportError as e:
            raise PatchRefused(f"fp8audit.te: Transformer Engine's PyTorch part does not import "
                               f"({e})") from None
        version = te_version()
        problems = check(version)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise PatchRefused(f"fp8audit.te: not patched: {problems[0]}{more}")
        scope = _open_scope(mods, releases.get(version) or releases.Release(version, {}))
        if scope:
            raise PatchRefused(f"fp8audit.te: not patched: {scope}; patch before training starts")
        try:
            controller = Controller(mods, version, bool(verify))
        except ModelUnavailable as e:  # its message: "fp8audit.te: no usable ...", one line
            why = " ".join(str(e).removeprefix("fp8audit.te: ").split())
            raise PatchRefused(f"fp8audit.te: not patched: {why}") from None
        controller.install()
        _active = controller
    _announce(version)
    return controller


def unpatch() -> bool:
    """Restores TE's own functions; False when nothing was patched. Refuses (PatchRefused) while
    an autocast or checkpoint is open."""
    global _active, _left
    with _lock:
        if _active is None:
            return False
        scope = _open_scope(_active.mods, _active.release) or (
            "a checkpoint frame or recompute is open" if _active.model.open_frames else None) or (
            f"{len(_active.pending)} checkpoint(s) await their recompute (run backward first)"
            if _active.pending else None)
        if scope:
            raise PatchRefused(f"fp8audit.te: not unpatched: {scope}")
        _active.remove()
        _active = _left = None
    os.environ.pop("FP8AUDIT_TE_PATCHED", None)
    return True


def active() -> Optional[Controller]:
    """The patch in force, else None."""
    return _active


@contextlib.contextmanager
def patched(verify: Optional[bool] = None) -> Iterator[Controller]:
    """`with fp8audit.te.patched():` the fix for the block (patch() on entry, raising PatchRefused
    before the block runs), and TE's own functions again after it, unless the patch was in force
    before the block. Where TE cannot be restored when the block ends (a checkpointed forward of
    the block still awaits its backward), the patch stays in force, said in one line on stderr,
    and the block's own exception, if any, propagates unchanged; unpatch() removes it once that
    backward ran (or the forward was dropped), as does the end of the next patched() block."""
    owned = _active is None or _active is _left
    controller = _apply(verify)
    try:
        yield controller
    except BaseException:
        if owned:
            _restore_after_block(controller, failed=True)
        raise
    if owned:
        _restore_after_block(controller, failed=False)


def _restore_after_block(controller: Controller, failed: bool) -> None:
    """unpatch() at the end of a patched() block; never raises PatchRefused, and raises nothing
    where the block failed (its exception goes on)."""
    global _left
    if _active is not controller:
        return  # unpatched inside the block
    try:
        unpatch()
    except PatchRefused as e:
        _left = controller
        why = str(e).removeprefix("fp8audit.te: not unpatched: ")
        print(f"fp8audit.te: the patch stays in force after its `with fp8audit.te.patched():` "
              f"block: {why}; call fp8audit.te.unpatch() after that (the end of the next "
              f"patched() block does too)", file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - the block's own exception must not be masked
        if not failed:
            raise
        print(f"fp8audit.te: unpatch() after the failed `with fp8audit.te.patched():` block "
              f"raised {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr,
              flush=True)


def _announce(version: str) -> None:
    """Marks the process as patched: the environment (inherited by children) and one NVTX mark
    `fp8audit.patch te=<version> semantics=fixed` that the agent can record."""
    os.environ["FP8AUDIT_TE_PATCHED"] = version
    from fp8audit._nvtx import mark

    mark(f"fp8audit.patch te={version} semantics=fixed")
