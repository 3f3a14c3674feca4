"""A CPU stand-in of Transformer Engine 2.20.2's FP8 state handling, written for fp8audit's tests.

Same module paths, class and function names, signatures and state-handling behaviour as TE
2.20.2's pieces that fp8audit.te replaces or relies on (quantization.py, distributed.py,
module/base.py, linear.py, layernorm_linear.py, layernorm_mlp.py); the numerics are a simple
fake-FP8 (scaled rounding) so that scales matter. Not TE's code."""

# As TE 2.20.2's __init__ does: the framework package is imported first, and __version__ (from the
# package's metadata) is set only after it, so code running when transformer_engine.pytorch has
# finished importing sees no __version__ yet.
from . import pytorch  # noqa: E402,F401

__version__ = "2.20.2+standin"
