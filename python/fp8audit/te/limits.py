"""Where fp8audit.te's fix and the fixed ownership model it follows part, by the name of the
state/scenarios file that shows it (state/SEMANTICS.md says why), with the counts each gives per
microbatch. On these scenarios a patched TE counts other than the model, as documented: tables and
tests that compare the two accept exactly these counts there, and nothing else."""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple


class Limit(NamedTuple):
    """One documented limit: why the fix parts from the model there, and the counts of each."""

    why: str
    fix: Tuple[int, int]  # (forward, backward) updates per microbatch under the fix
    model: Tuple[int, int]  # the fixed model's


FIX_CANNOT_TELL: Dict[str, Limit] = {
    "checkpoint_fp8_module_under_no_grad": Limit(
        "the job's own no_grad inside a reentrant checkpoint's forward, which the fix cannot tell "
        "from the checkpoint's: it keeps the frame's reservation and the backward update is lost",
        fix=(1, 0), model=(1, 1)),
}


def is_known_limit(scenario: str, counts: list, model: list) -> bool:
    """Whether `counts` (the patched TE's, per microbatch) and `model` (the fixed model's) are
    exactly the documented limit of `scenario`."""
    limit = FIX_CANNOT_TELL.get(scenario)
    return limit is not None and bool(counts) and len(counts) == len(model) and \
        all(tuple(c) == limit.fix for c in counts) and all(tuple(m) == limit.model for m in model)
