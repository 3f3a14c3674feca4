"""The stand-in's public PyTorch API."""

from . import ops
from .attention import DotProductAttention
from .distributed import checkpoint
from .module.layernorm_linear import LayerNormLinear
from .module.layernorm_mlp import LayerNormMLP
from .module.linear import Linear
from .quantization import FP8GlobalStateManager, autocast, fp8_autocast
from . import quantization as _quantization

_quantization._sync_pr_3456()  # quantization_backward_scope here too, with WITH_PR_3456 only

__all__ = ["DotProductAttention", "FP8GlobalStateManager", "LayerNormLinear", "LayerNormMLP",
           "Linear", "autocast", "checkpoint", "fp8_autocast", "ops"]
