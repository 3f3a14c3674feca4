"""The python hook's marks of TE PR #3456's quantization_backward_scope() (part of te-count).

Under the PR the scope widens the logical backward: only its outermost entry acts, and its exit
runs the one backward update, whose amax all-reduce every rank must join, so every rank must enter
and leave it (docs/te-pr-3456.md, sections 4-5). Where TE has the scope (in
transformer_engine.pytorch.quantization and, as TE's own test calls it, in transformer_engine.
pytorch), both names are replaced by one wrapper that sends

    fp8audit.te.site site=<path>:<line> in <function>   (where the job entered it)
    fp8audit.te.scope at=enter

at the outermost entry, and `fp8audit.te.scope at=exit` after the outermost exit returned (TE's
update done; also when the body raised). Nested entries send nothing, as TE's do nothing. The
agent records the marks as BACKWARD_SCOPE events; the report fails a rank whose outermost scope is
never left, and a job whose ranks did not all leave it in the same microbatch. The wrapper is a
context manager like TE's (functools.wraps keeps its name and __wrapped__) and calls TE's own
scope unchanged; no tensor read, no synchronization."""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable, Iterator, List

from fp8audit import _nvtx
from fp8audit._markers import HOOK_SCOPE_MARK
from fp8audit._te_scheduling import PR_3456_SCOPE
from fp8audit.hook import callsite

ENTER = f"{HOOK_SCOPE_MARK} at=enter"
EXIT = f"{HOOK_SCOPE_MARK} at=exit"
_depth = [0]  # this process's open scopes, as TE's quantization_backward_scope_depth


def _mark(first: Callable[[], str], *more: str) -> None:
    """Sends the marks; a failure to make or send one never reaches the job (nor replaces the
    exception its scope's body raised): the audit then sees the scope unbalanced, never the job."""
    try:
        for text in (first(), *more):
            _nvtx.mark(text)
    except Exception:
        pass


def wrap(scope: Any) -> Any:
    """A context manager that enters TE's `scope` and marks its outermost entry and exit."""

    @functools.wraps(scope)
    @contextlib.contextmanager
    def marked(*args: Any, **kwargs: Any) -> Iterator[Any]:
        import fp8audit.hook

        # TE's own context manager first: a call TE refuses raises as without the hook, unmarked.
        inner = scope(*args, **kwargs)
        # Paused recording (fp8audit.hook.set_recording): no marks, for this scope's exit too.
        marks = _depth[0] == 0 and fp8audit.hook.recording()
        _depth[0] += 1
        try:
            if marks:
                _mark(lambda: callsite.mark_text(callsite.user_site(sys._getframe(3))), ENTER)
            with inner as value:
                yield value
        finally:
            _depth[0] -= 1
            if marks:
                _mark(lambda: EXIT)

    marked.__fp8audit_scope__ = True  # type: ignore[attr-defined]
    return marked


def install() -> List[str]:
    """Wraps quantization_backward_scope wherever TE has it (the same object under both names gets
    one wrapper); returns the modules it wrapped it in ([] on a TE without PR #3456)."""
    done: List[str] = []
    wrappers: dict = {}  # id(TE's scope) -> its wrapper
    for name in ("transformer_engine.pytorch.quantization", "transformer_engine.pytorch"):
        module = sys.modules.get(name)
        scope = getattr(module, PR_3456_SCOPE, None) if module is not None else None
        if scope is None or not callable(scope) or getattr(scope, "__fp8audit_scope__", False):
            continue
        wrapper = wrappers.setdefault(id(scope), wrap(scope))
        setattr(module, PR_3456_SCOPE, wrapper)
        done.append(name)
    return done
