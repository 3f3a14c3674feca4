"""fp8audit's Python side.

- `fp8audit.microbatch()`: `with fp8audit.microbatch(): ...` marks one logical microbatch for the
  agent (`fp8audit run`); `fp8audit.step()` marks an optimizer step; `fp8audit.update()` announces
  an FP8 state update no kernel shows (e.g. on the CPU). They never raise and need no torch.
- `fp8audit.ops`: the kernels' torch library (torch.ops.fp8audit.*, the optional fp8audit-ops
  package), loaded at its first use (`import fp8audit.ops` or the attribute); it needs torch,
  `import fp8audit` never does.
- `fp8audit.te` (the fixed FP8 ownership applied to Transformer Engine), `fp8audit.hook` (what
  `fp8audit run` installs into a job's Python processes), `fp8audit.pytest_plugin` (`pytest
  --fp8audit`), `python -m fp8audit ...` (the fp8audit command).

PYTEST_DONT_REWRITE: the package holds a pytest plugin, whose modules pytest would rewrite; under
`fp8audit run` the hook has imported it before pytest starts (and it asserts nothing of a test's)."""

from __future__ import annotations

import importlib
from typing import Any

from fp8audit._markers import microbatch, step, update


def _source_version() -> str:
    """The project's version in a source checkout (CMakeLists.txt's project(), which the wheel's
    version is read from too), else "unknown" (a prefix install: its fp8audit --version says it)."""
    import re
    from pathlib import Path

    try:
        text = (Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    except OSError:
        return "unknown"
    found = re.search(r"project\(fp8audit VERSION ([0-9.]+)", text)
    return found.group(1) if found else "unknown"


try:
    from fp8audit._build import VERSION as __version__  # a wheel's build facts
except ImportError:
    __version__ = _source_version()

__all__ = ["microbatch", "step", "update", "ops", "te", "megatron", "hook", "__version__"]

_LAZY = ("ops", "te", "megatron", "hook", "pytest_plugin")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"fp8audit.{name}")
    raise AttributeError(f"module 'fp8audit' has no attribute {name!r}")
