"""fp8audit.te: the fixed FP8 DelayedScaling update ownership applied to an installed Transformer
Engine (one forward and one backward global update per logical microbatch under any checkpoint
layout).

    import fp8audit.te
    fp8audit.te.patch()      # before the first autocast; raises PatchRefused with one line if not
    ...train...
    fp8audit.te.unpatch()    # optional
    with fp8audit.te.patched():  # or: the fix for one block only
        ...train...

Decisions come from the C++ ownership model (state/, libfp8audit_model.so). patch() checks the
installed TE against fingerprints of every function it replaces or relies on (each verified
release's, releases/) and changes nothing otherwise. `fp8audit run --fix-te -- CMD` applies it
to an unmodified job."""

from ._gate import check
from ._lifecycle import active, patch, patched, unpatch
from ._patch import NotCovered, PatchRefused, VerifyError

__all__ = ["NotCovered", "PatchRefused", "VerifyError", "active", "check", "is_patched", "patch",
           "patched", "status", "unpatch"]


def is_patched() -> bool:
    """Whether the fix is in force (patch() applied, unpatch() not yet)."""
    return active() is not None


def status() -> dict:
    """Counts since patch(): updates TE performed, the model's, problems found."""
    c = active()
    if c is None:
        return {"patched": False}
    return {"patched": True, "te_version": c.version, "verify": c.verify,
            "forward_updates": c.counts["forward"], "backward_updates": c.counts["backward"],
            "model_forward_updates": c.model.forward_updates,
            "model_backward_updates": c.model.backward_updates,
            "open_frames": c.model.open_frames, "violations": list(c.violations)}
