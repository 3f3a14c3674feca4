"""Stand-in of TE 2.20.2's module/base.py: FP8 metadata per module and the recompute stash
handling at the start and end of every module forward."""

from typing import Any

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
        meta["recipe"] = recipe
        history = getattr(recipe, "amax_history_len", 1)
        meta["scaling_fwd"] = ScalingState(self.FORWARD_TENSORS, history)
        meta["scaling_bwd"] = ScalingState(self.BACKWARD_TENSORS, history)
        meta.pop("buffer_index", None)
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
