"""The Transformer Engine releases fp8audit.te was verified on: one small module per release
(te_2_20_2.py, ...), each a `Release` with the fingerprints of every target of its state layout
(_targets.targets(layout)) read from that release's wheel and the backports its code needs to
reach the fixed semantics. Adding a release: run `python -m fp8audit.te.fingerprint DIR` on its
wheel's transformer_engine/pytorch, write te_X_Y_Z.py, add it to _MODULES below, and verify it
live (tests/live_te/run_fix_live.sh)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from .._targets import STATE_CLASS_ATTRIBUTES, STATE_DATACLASS, STATE_LAYOUTS

# Backports: behaviour of TE's PR #3394 (eval-module and no-grad stash pairing, in 2.20) that a
# release before it lacks and that the fixed semantics relies on; _backports.py applies them.
EVAL_MODULE_STASH = "eval-module-stash"  # prepare_forward stashes whatever the training mode
INELIGIBLE_CHECKPOINT = "ineligible-checkpoint"  # a checkpoint no input of which needs grad
BACKPORTS = (EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT)  # opens no recompute frame

# The names of TE's two recompute globals in distributed.py, (region, phase), which the patch sets
# as its model decides: TE's PR #3284 (in 2.19) renamed them. Before it the first was set to
# `region and is_fp8_enabled()` at the region's entry; the patch sets it to the region alone, the
# same wherever TE reads it (every reader also requires FP8: releases/te_2_17_1.py).
RECOMPUTE_GLOBALS = ("_IN_ACTIVATION_RECOMPUTE_REGION", "_ACTIVATION_RECOMPUTE_PHASE")
RECOMPUTE_GLOBALS_BEFORE_PR_3284 = ("_FP8_ACTIVATION_RECOMPUTE_ENABLED",
                                    "_FP8_ACTIVATION_RECOMPUTE_PHASE")


@dataclass(frozen=True)
class Release:
    """One verified TE release: its version string as transformer_engine.__version__ gives it,
    the fingerprints of its targets, the backports the fix applies there, the names of its
    recompute globals and where it keeps its global FP8 state (STATE_DATACLASS from 2.15, TE's
    PR #2759; STATE_CLASS_ATTRIBUTES before)."""

    version: str
    fingerprints: Mapping[str, str]
    backports: Tuple[str, ...] = field(default=())
    recompute_globals: Tuple[str, str] = RECOMPUTE_GLOBALS
    state_layout: str = STATE_DATACLASS

    def __post_init__(self) -> None:
        unknown = [b for b in self.backports if b not in BACKPORTS]
        if unknown:
            raise ValueError(f"release {self.version}: unknown backports {unknown}")
        if self.recompute_globals not in (RECOMPUTE_GLOBALS, RECOMPUTE_GLOBALS_BEFORE_PR_3284):
            raise ValueError(f"release {self.version}: unknown recompute globals "
                             f"{self.recompute_globals}")
        if self.state_layout not in STATE_LAYOUTS:
            raise ValueError(f"release {self.version}: unknown FP8 state layout "
                             f"{self.state_layout!r}")


_MODULES = ("te_2_14_1", "te_2_16_0", "te_2_17_1", "te_2_18_0", "te_2_19_0", "te_2_20_2")
_REGISTRY: Dict[str, Release] = {}


def _load() -> Dict[str, Release]:
    if not _REGISTRY:
        for name in _MODULES:
            release = importlib.import_module(f"{__name__}.{name}").RELEASE
            _REGISTRY[release.version] = release
    return _REGISTRY


def get(version: str) -> Optional[Release]:
    """The verified release of that exact version, else None."""
    return _load().get(version)


def verified() -> Tuple[str, ...]:
    """Every verified version, oldest first."""
    return tuple(sorted(_load(), key=lambda v: [int(p) if p.isdigit() else p
                                                 for p in v.replace("+", ".").split(".")]))


def register(release: Release) -> None:
    """Adds a release at run time (tests register the CPU stand-in of TE this way)."""
    _load()[release.version] = release


def unregister(version: str) -> None:
    """Removes a release registered at run time."""
    _load().pop(version, None)


def register_source_tree(version: str, package_dir: Any, backports: Tuple[str, ...] = (),
                         recompute_globals: Tuple[str, str] = RECOMPUTE_GLOBALS,
                         state_layout: str = STATE_DATACLASS) -> Release:
    """Registers `version` with the fingerprints read from a source tree (the directory
    transformer_engine/pytorch; targets it lacks are left out): the CPU stand-in of TE in tests."""
    from pathlib import Path

    from .. import _fingerprint, _targets

    found = _fingerprint.of_source_tree(Path(package_dir), _targets.targets(state_layout))
    release = Release(version, {k: v for k, v in found.items() if v is not None}, backports,
                      recompute_globals, state_layout)
    register(release)
    return release


__all__ = ["BACKPORTS", "EVAL_MODULE_STASH", "INELIGIBLE_CHECKPOINT", "RECOMPUTE_GLOBALS",
           "RECOMPUTE_GLOBALS_BEFORE_PR_3284", "Release", "STATE_CLASS_ATTRIBUTES",
           "STATE_DATACLASS", "get", "register", "register_source_tree", "unregister", "verified"]
