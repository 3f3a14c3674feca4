"""fp8audit's Python side: `fp8audit.te` (the fixed FP8 ownership applied to Transformer Engine)
and `fp8audit.hook` (what `fp8audit run` installs into a job's Python processes)."""

__all__ = ["te", "hook"]
