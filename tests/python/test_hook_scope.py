"""The Python hook's marks of TE PR #3456's quantization_backward_scope (hook/scope.py, part of
te-count), on fake TE modules (no torch): the wrapper replaces both of TE's names, stays a context
manager with TE's name, enters TE's own scope unchanged, marks only the outermost entry (with the
job's site) and exit (also when the body raises), sends nothing while recording is paused, and a
failure is one line on stderr with the counting left in place. A TE without the scope: nothing."""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any, Iterator, List

import pytest

import fp8audit._nvtx
import fp8audit.hook as hook
from fp8audit.hook import scope as hook_scope

QUANTIZATION = "transformer_engine.pytorch.quantization"
PYTORCH = "transformer_engine.pytorch"


def fake_te(monkeypatch: pytest.MonkeyPatch, with_scope: bool = True) -> List[str]:
    """TE's two modules with (or without) PR #3456's scope, the same object in both, as TE has
    it; returns the log of what TE's own scope did."""
    log: List[str] = []

    @contextlib.contextmanager
    def quantization_backward_scope() -> Iterator[str]:
        """TE's docstring."""
        log.append("te enter")
        try:
            yield "te value"
        finally:
            log.append("te exit")

    quantization = types.ModuleType(QUANTIZATION)
    pytorch = types.ModuleType(PYTORCH)
    if with_scope:
        quantization.quantization_backward_scope = quantization_backward_scope  # type: ignore
        pytorch.quantization_backward_scope = quantization_backward_scope  # type: ignore
    monkeypatch.setitem(sys.modules, QUANTIZATION, quantization)
    monkeypatch.setitem(sys.modules, PYTORCH, pytorch)
    monkeypatch.setattr(hook_scope, "_depth", [0])
    return log


def marks(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    sent: List[str] = []
    monkeypatch.setattr(fp8audit._nvtx, "mark", sent.append)
    return sent


def test_both_names_get_one_wrapper_that_keeps_te_s_name_and_scope(monkeypatch):
    log = fake_te(monkeypatch)
    te_scope = sys.modules[QUANTIZATION].quantization_backward_scope  # type: ignore
    sent = marks(monkeypatch)
    assert hook_scope.install() == [QUANTIZATION, PYTORCH]
    wrapped: Any = sys.modules[PYTORCH].quantization_backward_scope  # type: ignore
    assert wrapped is sys.modules[QUANTIZATION].quantization_backward_scope  # type: ignore
    assert wrapped.__wrapped__ is te_scope
    assert (wrapped.__name__, wrapped.__doc__) == ("quantization_backward_scope", "TE's docstring.")
    assert hook_scope.install() == []  # once
    with wrapped() as value:
        assert value == "te value"
        assert log == ["te enter"]
        with wrapped():  # nested: TE's inner entry, no mark
            pass
    assert log == ["te enter", "te enter", "te exit", "te exit"]
    assert [m for m in sent if not m.startswith("fp8audit.te.site")] == [
        "fp8audit.te.scope at=enter", "fp8audit.te.scope at=exit"]
    assert sent[0].startswith("fp8audit.te.site site=") and "test_hook_scope.py" in sent[0], sent


def test_the_exit_is_marked_when_the_body_raises_and_the_error_goes_on(monkeypatch):
    log = fake_te(monkeypatch)
    sent = marks(monkeypatch)
    hook_scope.install()
    with pytest.raises(ValueError, match="from the body"):
        with sys.modules[QUANTIZATION].quantization_backward_scope():  # type: ignore
            raise ValueError("from the body")
    assert log == ["te enter", "te exit"]
    assert sent[-1] == "fp8audit.te.scope at=exit"
    assert hook_scope._depth == [0]


def test_paused_recording_sends_nothing(monkeypatch):
    fake_te(monkeypatch)
    sent = marks(monkeypatch)
    hook_scope.install()
    monkeypatch.setattr(hook, "_recording", False)
    with sys.modules[QUANTIZATION].quantization_backward_scope():  # type: ignore
        pass
    assert sent == []


def test_a_te_without_the_scope_is_left_as_it_is(monkeypatch):
    fake_te(monkeypatch, with_scope=False)
    assert hook_scope.install() == []
    assert not hasattr(sys.modules[PYTORCH], "quantization_backward_scope")


def test_a_failure_says_one_line_and_steps_aside(monkeypatch, capsys):
    fake_te(monkeypatch)

    def broken() -> List[str]:
        raise RuntimeError("no scope today")

    monkeypatch.setattr(hook_scope, "install", broken)
    hook._te_scope()
    assert capsys.readouterr().err == (
        "fp8audit: python hook 'te-count' could not mark quantization_backward_scope "
        "(RuntimeError: no scope today); continuing without its marks\n")


def test_a_call_te_refuses_raises_at_the_call_as_without_the_hook_and_is_not_marked(monkeypatch):
    fake_te(monkeypatch)

    @contextlib.contextmanager
    def strict() -> Iterator[None]:  # TE's scope takes no argument
        yield

    sys.modules[QUANTIZATION].quantization_backward_scope = strict  # type: ignore
    sys.modules[PYTORCH].quantization_backward_scope = strict  # type: ignore
    sent = marks(monkeypatch)
    hook_scope.install()
    wrapped: Any = sys.modules[PYTORCH].quantization_backward_scope  # type: ignore
    with pytest.raises(TypeError):
        with wrapped("unexpected"):
            pass
    assert sent == [] and hook_scope._depth == [0]


def test_a_mark_that_fails_never_reaches_the_job_nor_replaces_its_exception(monkeypatch):
    log = fake_te(monkeypatch)
    hook_scope.install()
    wrapped: Any = sys.modules[PYTORCH].quantization_backward_scope  # type: ignore

    def broken(text: str) -> None:
        raise OSError("nvtx is gone")

    monkeypatch.setattr(fp8audit._nvtx, "mark", broken)
    with wrapped() as value:
        assert value == "te value"
    with pytest.raises(KeyError, match="the job's own"):
        with wrapped():
            raise KeyError("the job's own")
    assert log == ["te enter", "te exit"] * 2 and hook_scope._depth == [0]
