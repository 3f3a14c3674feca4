"""What fp8audit.te replaces in Transformer Engine, what it relies on unchanged, and the
fingerprints of both (see _fingerprint.py); the releases verified, each with its fingerprints,
are in releases/."""

from __future__ import annotations

PACKAGE = "transformer_engine.pytorch"

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
# the recompute globals and the stash): verified, not changed.
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

TARGETS = REPLACED + RELIED_ON
