"""The stand-in's public PyTorch API."""

from . import ops
from .attention import DotProductAttention
from .distributed import checkpoint
from .module.layernorm_linear import LayerNormLinear
from .module.layernorm_mlp import LayerNormMLP
from .module.linear import Linear
from .quantization import FP8GlobalStateManager, autocast, fp8_autocast

__all__ = ["DotProductAttention", "FP8GlobalStateManager", "LayerNormLinear", "LayerNormMLP",
           "Linear", "autocast", "checkpoint", "fp8_autocast", "ops"]
