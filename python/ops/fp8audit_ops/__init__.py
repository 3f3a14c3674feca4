"""fp8audit-ops: the library of torch.ops.fp8audit (libfp8audit_ops.so, the fenced FP8 kernels),
built against the torch of this environment. Use it through `fp8audit.ops`, which loads it and
checks that this torch is the one it was built for; importing this package loads nothing."""

from __future__ import annotations

from pathlib import Path

LIBRARY = Path(__file__).resolve().parent / "libfp8audit_ops.so"
