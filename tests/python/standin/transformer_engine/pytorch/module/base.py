"""Stand-in of TE 2.20.2's module/base.py: FP8 metadata per module and the recompute stash
handling at the start and end of every module forward."""

from typing import Any, Optional, Tuple

import torch

from .. import _release
from ..distributed import in_fp8_activation_recompute_phase, is_fp8_activation_recompute_enabled
from ..quantization import FP8GlobalStateManager, _has_delayed_scaling_state


class ScalingState:
    """Amax history [len, n] and scale [n] of one direction of a module."""

    def __init__(self, n: int, history: int) -> None:
        self.amax_history = torch.zeros(history, n)
        self.scale = torch.ones(n)


def fake_fp8(x: torch.Tensor, scale: torch.Tensor, fp8_max: float) -> torch.Tensor:
    """Scaled rounding with saturation: FP8-like loss that depends on the scale."""
    return torch.clamp(torch.round(x * scale * 8) / 8, -fp8_max, fp8_max) / scale


class WeightQuantizer:
    """The stand-in's weight quantizer: the scale it quantizes with and the format's maximum."""

    def __init__(self, scale: torch.Tensor, fp8_max: float) -> None:
        self.scale = scale
        self.fp8_max = fp8_max


def quantize_weight(*, tensor: Optional[torch.Tensor] = None,
                    quantizer: Optional[WeightQuantizer] = None,
                    workspace: Optional[torch.Tensor] = None, update_workspace: bool = True,
                    skip_update_flag: Optional[torch.Tensor] = None, fsdp_group: Any = None,
                    workspace_dtype: Any = None,
                    cache: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """TE 2.20.2's module/base.py quantize_weight, its keywords and its caching: an existing
    workspace is re-quantized in place when update_workspace (or a skip_update_flag) says so,
    else returned as it is; a missing one is made, and returned second when `cache`."""
    del fsdp_group, workspace_dtype
    if workspace is not None:
        if skip_update_flag is not None:
            update_workspace = True
        if update_workspace:
            if tensor is None or quantizer is None:
                raise ValueError("tensor kwarg must be provided to update FP8 workspace")
            if skip_update_flag is None or not bool(skip_update_flag):
                workspace.copy_(fake_fp8(tensor.detach(), quantizer.scale, quantizer.fp8_max))
        return workspace, None
    if tensor is None or quantizer is None:
        raise ValueError("tensor and quantizer kwargs must be provided to construct FP8 workspace")
    out = fake_fp8(tensor.detach(), quantizer.scale, quantizer.fp8_max)
    return out, (out if cache else None)


def record_amax(history: torch.Tensor, index: int, x: torch.Tensor) -> None:
    history[0, index] = torch.maximum(history[0, index], x.detach().abs().max())


class TransformerEngineBaseModule(torch.nn.Module):
    FORWARD_TENSORS = 2
    BACKWARD_TENSORS = 1

    def __init__(self) -> None:
        super().__init__()
        self.fp8_initialized = False
        self.fp8 = False
        self.fp8_calibration = False
        self.fp8_meta: dict = {"fp8_checkpoint": False, "fp8_group": None}
        self._fp8_workspaces: dict = {}  # FP8 weight caches (is_first_microbatch), by name

    def fast_setattr(self, name: str, value: Any) -> None:
        self.__dict__[name] = value

    def init_fp8_metadata(self, num_gemms: int = 1) -> None:
        meta = self.fp8_meta
        fp8 = FP8GlobalStateManager.is_fp8_enabled()
        self.fast_setattr("fp8", fp8)
        meta["fp8_checkpoint"] = fp8
        if not fp8:
            self.fast_setattr("fp8_initialized", False)
            return
        recipe = FP8GlobalStateManager.get_fp8_recipe()
        if self.fp8_initialized and meta.get("recipe") == recipe:
            return
        previous = meta.get("recipe")
        meta["recipe"] = recipe
        # TE's set_meta_tensor: DelayedScaling after DelayedScaling keeps the state (and its place
        # in the global buffers); any other change makes a new one, while TE keeps the module's
        # first registration (add_fp8_tensors_to_global_buffer runs once per module).
        if "scaling_fwd" in meta and previous is not None and previous.delayed() and \
                recipe.delayed():
            self.fast_setattr("fp8_initialized", True)
            return
        history = getattr(recipe, "amax_history_len", 1)
        meta["scaling_fwd"] = ScalingState(self.FORWARD_TENSORS, history)
        meta["scaling_bwd"] = ScalingState(self.BACKWARD_TENSORS, history)
        self.fast_setattr("fp8_initialized", True)

    def prepare_forward(self, inp: torch.Tensor, num_gemms: int = 1,
                        allow_non_contiguous: bool = False) -> torch.Tensor:
        if self.fp8 and in_fp8_activation_recompute_phase():
            FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute(self.fp8_meta)
        else:
            self.init_fp8_metadata(num_gemms=num_gemms)
            if self.fp8 and _has_delayed_scaling_state(self.fp8_meta):
                FP8GlobalStateManager.add_fp8_tensors_to_global_buffer(self.fp8_meta)
                if is_fp8_activation_recompute_enabled() and (
                        self.training or not _release.BEFORE_PR_3394):
                    FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute(
                        self.fp8_meta)
        if not allow_non_contiguous and not inp.is_contiguous():
            inp = inp.contiguous()
        return inp

    def end_forward(self) -> None:
        delayed = self.fp8 and _has_delayed_scaling_state(self.fp8_meta)
        if delayed and self.fp8 and in_fp8_activation_recompute_phase():
            FP8GlobalStateManager.restore_fp8_meta_tensors(self.fp8_meta)

    def fp8_max(self, forward: bool) -> float:
        fmt = self.fp8_meta["recipe"].fp8_format
        return fmt.max_fwd if forward else fmt.max_bwd
