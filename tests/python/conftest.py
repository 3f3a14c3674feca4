"""pytest setup: the fp8audit package from python/, the CPU stand-in of Transformer Engine, and
the stand-in's fingerprints registered as a verified release (computed from its source files)."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STANDIN = HERE / "standin"
sys.path[:0] = [str(ROOT / "python"), str(STANDIN), str(ROOT / "tests" / "live_te")]

torch = pytest.importorskip("torch")

from fp8audit.te import releases  # noqa: E402

STANDIN_VERSION = "2.20.2+standin"
releases.register_source_tree(STANDIN_VERSION, STANDIN / "transformer_engine" / "pytorch")


def reset_te() -> None:
    """A fresh stand-in TE state, as a new process would have."""
    from transformer_engine.pytorch import distributed
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    FP8GlobalStateManager.reset()
    distributed.activation_recompute_forward._is_first_fp8_module.clear()
    for name in releases.RECOMPUTE_GLOBALS + releases.RECOMPUTE_GLOBALS_BEFORE_PR_3284:
        if hasattr(distributed, name):  # the release's names (renamed in TE 2.19)
            setattr(distributed, name, False)


def as_release(monkeypatch, profile: str, before: tuple) -> str:
    """The stand-in behaving as TE `profile` (before the PRs named in `before`: "3394", "3284",
    "2759"; _release.py), its state laid out afresh, registered as "<profile>+standin" with that
    release's backports, recompute globals and state layout; returns that version. Unpatch and
    unregister it after the test."""
    import transformer_engine
    from transformer_engine.pytorch import _release

    for pr in before:
        monkeypatch.setattr(_release, f"BEFORE_PR_{pr}", True)
    reset_te()
    version = f"{profile}+standin"
    monkeypatch.setattr(transformer_engine, "__version__", version)
    release = releases.get(profile)
    releases.register_source_tree(version, STANDIN / "transformer_engine" / "pytorch",
                                  release.backports, release.recompute_globals,
                                  release.state_layout)
    return version


def leave_release(version: str) -> None:
    """After a test on as_release's stand-in: the patch goes while the stand-in still follows that
    release, then its registration."""
    import fp8audit.te

    reset_te()
    if fp8audit.te.is_patched():
        fp8audit.te.unpatch()
    releases.unregister(version)


def fresh_megatron(monkeypatch, root: Path) -> None:
    """The stand-in megatron package under `root` first on the path, none imported yet."""
    monkeypatch.syspath_prepend(str(root))
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.fixture(autouse=True)
def clean_te():
    import fp8audit.te

    if fp8audit.te.is_patched():
        fp8audit.te.unpatch()
    reset_te()
    os.environ.pop("FP8AUDIT_TE_VERIFY", None)
    yield
    reset_te()  # a failing test may leave scopes open; the state is rebuilt before unpatching
    if fp8audit.te.is_patched():
        fp8audit.te.unpatch()
    reset_te()


@pytest.fixture
def pr_3456(monkeypatch):
    """The stand-in following TE PR #3456 (its backward update per autograd task,
    quantization_backward_scope), its state laid out afresh; TE 2.20.2 again after the test."""
    from transformer_engine.pytorch import _release

    monkeypatch.setattr(_release, "WITH_PR_3456", True)
    reset_te()
    yield
    monkeypatch.undo()
    reset_te()


@pytest.fixture
def patched():
    import fp8audit.te

    controller = fp8audit.te.patch(verify=True)
    yield controller
