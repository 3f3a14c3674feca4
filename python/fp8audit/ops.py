"""The kernels' torch library (kernels/torch_ops.cc): loads libfp8audit_ops.so into torch at
import, so `torch.ops.fp8audit.*` exist, and wraps its ops with types. Importing this module
imports torch; `import fp8audit` alone does not (fp8audit.ops is loaded at its first use). The
library is not in fp8audit's wheel, which is torch-free: it is the optional fp8audit-ops package
(python/ops), built against this environment's torch, or a build tree's.

FP8 tensors are uint8 codes; formats "e4m3" / "e5m2"; semantics (CPU = GPU, bit for bit):
kernels/README.md. `delayed_scaling_update(..., direction=...)` announces the update to the agent
when it runs on the CPU, where no update kernel is launched for the agent's kernel probe to count;
on a GPU the kernel launch is what counts (so each update counts once)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Tuple

import torch

from fp8audit import _markers, _paths

LIBRARY = "libfp8audit_ops.so"
INSTALL = ("pip install --no-build-isolation fp8audit-ops (its sdist, or ./python/ops in a "
           "checkout) in this environment")


class OpsUnavailable(ImportError):
    """libfp8audit_ops.so is missing, was built for another torch, or does not load."""


def _installed() -> Tuple[Optional[Path], Optional[str]]:
    """The optional fp8audit-ops package's library and the torch it was built against, where that
    package is installed (a wheel of fp8audit carries no torch library)."""
    try:
        import fp8audit_ops
        from fp8audit_ops import _build
    except ImportError:
        return None, None
    return Path(fp8audit_ops.LIBRARY), (_build.TORCH_VERSION or None)


def _find() -> Tuple[Optional[Path], Optional[str]]:
    """$FP8AUDIT_OPS_LIB, else the fp8audit-ops package, else a build tree's lib/ (built against
    the torch CMake found: FP8AUDIT_PYTHON)."""
    if os.environ.get("FP8AUDIT_OPS_LIB"):
        return _paths.find("lib", LIBRARY, "FP8AUDIT_OPS_LIB"), None
    path, built = _installed()
    if path is not None:
        return (path if path.is_file() else None), built
    return _paths.find("lib", LIBRARY), None


def _load() -> Path:
    path, built = _find()
    if path is None:
        raise OpsUnavailable(f"fp8audit.ops needs the optional torch ops ({LIBRARY}), built "
                             f"against your torch: {INSTALL}")
    running = torch.__version__.split("+")[0]
    if built is not None and built != running:
        raise OpsUnavailable(f"fp8audit.ops: {path} was built against torch {built}, this is "
                             f"torch {running}; rebuild it against this one: {INSTALL}")
    try:
        torch.ops.load_library(str(path))
    except OSError as e:
        raise OpsUnavailable(f"fp8audit.ops: cannot load {path}: {e}") from e
    return path


PATH: Path = _load()


def quantize(input: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor,
             scale_inv: torch.Tensor, fp8_format: str = "e4m3") -> torch.Tensor:
    """FP8 codes of input * scale; raises amax to max(amax, max|input|), sets scale_inv = 1/scale
    (in place; scale, amax, scale_inv: float32, one element, on input's device)."""
    return torch.ops.fp8audit.quantize(input, scale, amax, scale_inv, fp8_format)


def dequantize(data: torch.Tensor, scale_inv: torch.Tensor, fp8_format: str = "e4m3",
               out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """decode(data) * scale_inv as out_dtype."""
    return torch.ops.fp8audit.dequantize(data, scale_inv, fp8_format, out_dtype)


def cast_transpose(input: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor,
                   scale_inv: torch.Tensor,
                   fp8_format: str = "e4m3") -> Tuple[torch.Tensor, torch.Tensor]:
    """quantize() plus the transposed codes: (rowwise, columnwise)."""
    return torch.ops.fp8audit.cast_transpose(input, scale, amax, scale_inv, fp8_format)


def delayed_scaling_update(amax_history: torch.Tensor, scale: torch.Tensor,
                           scale_inv: torch.Tensor, fp8_format: str = "e4m3", margin: int = 0,
                           amax_algo: str = "max", *, direction: Optional[str] = None) -> None:
    """One global DelayedScaling update of num_tensors tensors, in place: amax_history float32
    [history_len, num_tensors] (row 0: the amaxes since the last update), scale and scale_inv
    float32 [num_tensors]. `direction` ("forward", "backward" or None: not known) is what the
    agent records for it on the CPU."""
    if direction not in ("forward", "backward", None):
        raise ValueError(f"direction must be 'forward', 'backward' or None, not {direction!r}")
    torch.ops.fp8audit.delayed_scaling_update(amax_history, scale, scale_inv, fp8_format, margin,
                                              amax_algo)
    if amax_history.device.type != "cuda":
        _markers.update(direction)
