from .quantization import FP8GlobalStateManager  # noqa: F401  (older import path)
