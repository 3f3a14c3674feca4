from .random import checkpoint
