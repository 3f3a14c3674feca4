"""Which backward scheduling an installed Transformer Engine has, told by its code (never by its
version): the one fingerprint of TE PR #3456 that the Python hook (the semantics it reports) and
fp8audit.te (standing aside) both use. Reads attributes only; imports nothing."""

from __future__ import annotations

from typing import Any

PR_3456_SCOPE = "quantization_backward_scope"  # in transformer_engine.pytorch.quantization
PR_3456_REQUEST = "request_backward_quantization_update"  # on FP8GlobalStateManager
# Its ownership semantics, as the model names it (state/semantics_registry.h): what the hook
# reports for such a TE, and fp8audit.te's word for the fix that TE carries itself.
PR_3456_SEMANTICS = "te-3456"


def has_pr_3456(quantization: Any) -> bool:
    """Whether TE's quantization module (transformer_engine.pytorch.quantization) carries TE PR
    #3456's backward update per autograd task: its scope, or its manager's request method
    (docs/te-pr-3456.md, "Fingerprints")."""
    manager = getattr(quantization, "FP8GlobalStateManager", None)
    return hasattr(quantization, PR_3456_SCOPE) or hasattr(manager, PR_3456_REQUEST)
