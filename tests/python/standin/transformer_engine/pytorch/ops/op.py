"""Stand-in of TE 2.20.2's ops/op.py and ops/sequential.py: a basic operation's math, its
quantizer count and FP8 metadata; calling one, or a Sequential of them, runs an OperationFuser."""

from typing import Any, List

import torch

from ..module.base import ScalingState, fake_fp8, record_amax
from ..quantization import FP8GlobalStateManager, _has_delayed_scaling_state


class FusibleOperation(torch.nn.Module):
    pass


class BasicOperation(FusibleOperation):
    def num_quantizers(self, mode: str) -> int:
        del mode
        return 0

    def op_forward(self, x: torch.Tensor, fp8: bool, record: bool = True) -> torch.Tensor:
        """The op's math; record: its amaxes go to its FP8 metadata (not when the fuser's
        backward redoes the math for its gradients)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .fuser import OperationFuser

        return OperationFuser([self])(x)


class Linear(BasicOperation):
    """y = x W^T, the input and weight fake-quantized at the forward scales under FP8."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.fp8_meta: dict = {"fp8_group": None}

    def num_quantizers(self, mode: str) -> int:
        return {"forward": 2, "backward": 1}.get(mode, 0)

    def op_forward(self, x: torch.Tensor, fp8: bool, record: bool = True) -> torch.Tensor:
        w = self.weight
        if fp8:
            recipe = FP8GlobalStateManager.get_fp8_recipe()
            meta = self.fp8_meta
            if meta.get("recipe") != recipe:
                history = getattr(recipe, "amax_history_len", 1)
                meta.update(recipe=recipe, scaling_fwd=ScalingState(2, history),
                            scaling_bwd=ScalingState(1, history))
                meta.pop(FP8GlobalStateManager.get_buffer_info(), None)
            if _has_delayed_scaling_state(meta):
                FP8GlobalStateManager.add_fp8_tensors_to_global_buffer(meta)
            fmax = recipe.fp8_format.max_fwd
            if record:
                record_amax(meta["scaling_fwd"].amax_history, 0, x)
                record_amax(meta["scaling_fwd"].amax_history, 1, w)
            x = fake_fp8(x, meta["scaling_fwd"].scale[0].clone(), fmax)
            w = fake_fp8(w, meta["scaling_fwd"].scale[1].clone(), fmax)
        return x @ w.t()


class LayerNorm(BasicOperation):
    """No quantizer of its own (te.LayerNorm in TE 2.20 is this op)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(features))

    def op_forward(self, x: torch.Tensor, fp8: bool, record: bool = True) -> torch.Tensor:
        del fp8, record
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight)


class Sequential(torch.nn.Module):
    def __init__(self, *ops: BasicOperation) -> None:
        super().__init__()
        self.ops = torch.nn.ModuleList(ops)

    def forward(self, x: torch.Tensor) -> Any:
        from .fuser import OperationFuser

        basic: List[BasicOperation] = list(self.ops)  # type: ignore[arg-type]
        return OperationFuser(basic)(x)
