"""Where fp8audit.te's fix and the fixed ownership model it follows part, by the name of the
state/scenarios file that shows it (state/SEMANTICS.md says why). On these scenarios a patched TE
counts other than the model, as documented: tables and tests that compare the two say so instead
of calling the row a disagreement."""

from __future__ import annotations

from typing import Dict

FIX_CANNOT_TELL: Dict[str, str] = {
    "checkpoint_fp8_module_under_no_grad":
        "the job's own no_grad inside a reentrant checkpoint's forward, which the fix cannot tell "
        "from the checkpoint's: it keeps the frame's reservation and the backward update is lost "
        "(the fix 1/0, the model 1/1)",
}
