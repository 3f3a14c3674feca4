"""Recipes of the stand-in (the subset fp8audit's tests use)."""

import enum
from dataclasses import dataclass


class Format(enum.Enum):
    E4M3 = (448.0, 448.0)
    HYBRID = (448.0, 57344.0)
    E2M1 = (6.0, 6.0)

    @property
    def max_fwd(self) -> float:
        return self.value[0]

    @property
    def max_bwd(self) -> float:
        return self.value[1]


class Recipe:
    def delayed(self) -> bool:
        return isinstance(self, DelayedScaling)

    def custom(self) -> bool:
        return False


@dataclass
class DelayedScaling(Recipe):
    fp8_format: Format = Format.HYBRID
    margin: int = 0
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: object = None


@dataclass
class Float8CurrentScaling(Recipe):
    fp8_format: Format = Format.HYBRID
    backward_override: object = None


# The block-scaled recipes: no global state to update (TE keeps their scales beside each
# quantized tensor); their fields as TE 2.20.2's, a subset (common/recipe/__init__.py).
@dataclass
class Float8BlockScaling(Recipe):
    fp8_format: Format = Format.E4M3
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: object = None


@dataclass
class MXFP8BlockScaling(Recipe):  # needs SM100 on TE; the stand-in runs it anywhere
    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: object = None
    enable_2d_quantization: bool = False


@dataclass
class NVFP4BlockScaling(Recipe):  # needs SM100 on TE; the stand-in runs it anywhere
    disable_rht: bool = False
    disable_stochastic_rounding: bool = False
    disable_2d_quantization: bool = False
    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: object = None
