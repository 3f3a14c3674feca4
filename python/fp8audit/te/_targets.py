"""What fp8audit.te replaces in Transformer Engine, what it relies on unchanged, and the
fingerprints of both (see _fingerprint.py); the releases verified, each with its fingerprints,
are in releases/. What is relied on depends on where the release keeps its global FP8 state
(`targets(layout)`, the layouts in _state_layouts.py)."""

from __future__ import annotations

from typing import Tuple

PACKAGE = "transformer_engine.pytorch"

STATE_DATACLASS = "dataclass"  # TE 2.15 on: FP8GlobalStateManager.quantization_state (PR #2759)
STATE_CLASS_ATTRIBUTES = "class-attributes"  # before: class attributes of FP8GlobalStateManager
STATE_LAYOUTS = (STATE_DATACLASS, STATE_CLASS_ATTRIBUTES)

# Replaced or wrapped (shared objects: class attributes and module functions looked up at call
# time, so names imported early reach the fixed code too).
REPLACED = (
    "quantization:FP8GlobalStateManager.autocast_enter",
    "quantization:FP8GlobalStateManager.autocast_exit",
    "quantization:FP8GlobalStateManager.is_first_fp8_module",
    "quantization:FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute",
    "quantization:FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute",
    "quantization:FP8GlobalStateManager.reduce_and_update_fp8_tensors",
    "quantization:FP8GlobalStateManager.reset",
    "distributed:activation_recompute_forward.__enter__",
    "distributed:activation_recompute_forward.__exit__",
    "distributed:get_activation_recompute_contexts",
    "distributed:_CheckpointFunction.forward",
    "distributed:_CheckpointFunction.backward",
    "module.layernorm_mlp:_LayerNormMLP.forward",
    "module.layernorm_mlp:_LayerNormMLP._recompute",
)

# Relied on as read (their calls into the replaced functions, their use of the first-module flag,
# the recompute globals and the stash): verified, not changed. This is the dataclass layout's
# list; the class-attribute layout's is RELIED_ON_CLASS_ATTRIBUTES.
RELIED_ON = (
    "quantization:FP8GlobalState",
    "quantization:FP8GlobalStateManager.get_autocast_state",
    "quantization:FP8GlobalStateManager.set_autocast_state",
    "quantization:FP8GlobalStateManager.restore_fp8_meta_tensors",
    "quantization:autocast.__enter__",
    "quantization:autocast.__exit__",
    "quantization:_has_delayed_scaling_state",
    "distributed:checkpoint",
    "distributed:is_fp8_activation_recompute_enabled",
    "distributed:in_fp8_activation_recompute_phase",
    "module.base:TransformerEngineBaseModule.prepare_forward",
    "module.base:TransformerEngineBaseModule.end_forward",
    "module.linear:_check_fp8_reduce_and_update",
    "module.linear:_Linear.forward",
    "module.layernorm_linear:_LayerNormLinear.forward",
    "module.layernorm_mlp:_LayerNormMLP._forward",
)

# Before PR #2759 there is no FP8GlobalState, `autocast` is a generator function, a module's stash
# guard is its recipe's `delayed()` and _Linear.forward reads the flag itself (no
# _check_fp8_reduce_and_update).
_DATACLASS_ONLY = ("quantization:FP8GlobalState", "quantization:autocast.__enter__",
                   "quantization:autocast.__exit__", "quantization:_has_delayed_scaling_state",
                   "module.linear:_check_fp8_reduce_and_update")
RELIED_ON_CLASS_ATTRIBUTES = ("quantization:autocast",) + tuple(
    t for t in RELIED_ON if t not in _DATACLASS_ONLY)

TARGETS = REPLACED + RELIED_ON


def targets(layout: str = STATE_DATACLASS) -> Tuple[str, ...]:
    """Every target of a release whose global FP8 state has that layout."""
    if layout == STATE_DATACLASS:
        return TARGETS
    if layout == STATE_CLASS_ATTRIBUTES:
        return REPLACED + RELIED_ON_CLASS_ATTRIBUTES
    raise ValueError(f"unknown FP8 state layout {layout!r} (known: {', '.join(STATE_LAYOUTS)})")

