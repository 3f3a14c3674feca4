"""fp8audit's Python hook: named features that `fp8audit run` switches on in every Python process
of a job (torchrun / srun children included) through FP8AUDIT_PYHOOK=feature[,feature...] and a
sitecustomize.py put first on PYTHONPATH (hook/site/). A feature runs when a module it watches has
finished importing (never importing it itself), or at once if that module is already imported.

Features: te-fix — fp8audit.te.patch() when transformer_engine.pytorch is imported;
te-version — one NVTX mark `fp8audit.te te=<version>` when transformer_engine is imported (what
the agent can record in the trace header to pick the model semantics of that TE release).
A feature that fails says so in one line on stderr; the job goes on without it."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Callable, Dict, List, Tuple

ENV = "FP8AUDIT_PYHOOK"


def _te_fix(module: object) -> None:
    del module
    import fp8audit.te

    try:
        fp8audit.te.patch()
    except fp8audit.te.PatchRefused as e:
        _say(f"--fix-te: {e}; the job runs with Transformer Engine unpatched")


def _te_version(module: object) -> None:
    mark(f"fp8audit.te te={getattr(module, '__version__', 'unknown')}")


def mark(message: str) -> None:
    """An NVTX mark (the agent receives marks of every domain) where CUDA is available."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.nvtx.mark(message)
    except Exception:  # NVTX is optional: never fail the job for a mark
        pass


# feature -> (watched module, action)
FEATURES: Dict[str, Tuple[str, Callable[[object], None]]] = {
    "te-fix": ("transformer_engine.pytorch", _te_fix),
    "te-version": ("transformer_engine", _te_version),
}

_pending: Dict[str, List[Tuple[str, Callable[[object], None]]]] = {}
_busy: set = set()


def _say(line: str) -> None:
    print(f"fp8audit: {line}", file=sys.stderr, flush=True)


def _run(name: str, action: Callable[[object], None], module: object) -> None:
    try:
        action(module)
    except Exception as e:  # a feature must never break the job
        _say(f"python hook '{name}' failed ({type(e).__name__}: {e}); continuing without it")


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
    """Arms the named features; returns the names it did not know (reported on stderr)."""
    unknown = []
    for name in features:
        if name not in FEATURES:
            unknown.append(name)
            continue
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
    names = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
    if names:
        install(names)
