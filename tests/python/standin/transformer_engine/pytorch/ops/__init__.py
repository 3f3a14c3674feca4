"""Stand-in of TE 2.20.2's te.ops: fusible operations run by an OperationFuser (fuser.py), with
te.ops.Linear holding DelayedScaling state and te.ops.LayerNorm none."""

from .fuser import OperationFuser
from .op import BasicOperation, FusibleOperation, LayerNorm, Linear, Sequential

__all__ = ["BasicOperation", "FusibleOperation", "LayerNorm", "Linear", "OperationFuser",
           "Sequential"]
