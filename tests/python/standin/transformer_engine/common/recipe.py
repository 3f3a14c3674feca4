"""Recipes of the stand-in (the subset fp8audit's tests use)."""

import enum
from dataclasses import dataclass


class Format(enum.Enum):
    E4M3 = (448.0, 448.0)
    HYBRID = (448.0, 57344.0)

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
