"""fp8audit.te's gate: which TE is installed, whether it already carries an upstream fix, and
whether every function the patch replaces or relies on is the verified release's (releases/)."""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any, Dict, List, Optional, Tuple

from .._te_scheduling import PR_3456_SEMANTICS, has_pr_3456
from . import _fingerprint, _targets, releases


def resolve(te_modules: Dict[str, Any], target: str) -> Tuple[Any, str, Any]:
    """(owner object, attribute name, raw attribute value) of `module:qualname`."""
    module, qualname = target.split(":")
    owner = te_modules[module]
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    name = parts[-1]
    raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    return owner, name, raw


def te_modules() -> Dict[str, Any]:
    out = {}
    for module in ("quantization", "distributed", "module.base", "module.linear",
                   "module.layernorm_linear", "module.layernorm_mlp"):
        out[module] = importlib.import_module(f"{_targets.PACKAGE}.{module}")
    return out


def te_version() -> str:
    """TE's version: its __version__, else its distribution's metadata. TE's __init__ imports
    transformer_engine.pytorch before it sets __version__, so a patch applied when that import
    finishes (the hook's te-fix) sees no __version__ yet."""
    te = sys.modules.get("transformer_engine") or importlib.import_module("transformer_engine")
    version = getattr(te, "__version__", None)
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("transformer_engine")
        except metadata.PackageNotFoundError:
            version = "unknown"
    return str(version)


PR_3456 = PR_3456_SEMANTICS  # upstream_fix's answer for a TE that schedules its update per task

# check()'s line for such a TE (`fp8audit: --fix-te: fp8audit.te: not patched: <this>; the job runs
# with Transformer Engine unpatched` under `fp8audit run --fix-te`).
PR_3456_LINE = (
    "transformer_engine {version} schedules its backward FP8 update per autograd task (TE PR "
    "#3456): its update ownership is TE's own, so fp8audit.te leaves it alone; a logical "
    "microbatch spanning several backward() calls needs `with te.quantization_backward_scope():` "
    "around them, and recomputes under torch's/Megatron's checkpoints are left as TE runs them "
    "(the audit still reports them)")


def pr_3456(mods: Dict[str, Any]) -> bool:
    """Whether TE carries PR #3456 ("Schedule delayed-scaling updates after backward"), by its
    fingerprint (docs/te-pr-3456.md §4), never by its version: `quantization_backward_scope` in
    transformer_engine.pytorch.quantization or FP8GlobalStateManager's
    request_backward_quantization_update."""
    return has_pr_3456(mods["quantization"])


def upstream_fix(mods: Dict[str, Any]) -> Optional[str]:
    """A sign that TE already carries an ownership fix of its own (PR #3213 or alike; PR_3456 for
    TE PR #3456's per-task backward update)."""
    dist, quant = mods["distributed"], mods["quantization"]
    if pr_3456(mods):
        return PR_3456
    if hasattr(dist, "_ActivationRecomputeState"):
        return "distributed._ActivationRecomputeState"
    # An earlier design of TE's own per-step backward update (docs/te-pr-3456.md §3): the update
    # marked pending and run at the next autocast entry; its ownership is TE's too.
    if hasattr(quant.FP8GlobalStateManager, "schedule_backward_quantization_update"):
        return "FP8GlobalStateManager.schedule_backward_quantization_update"
    params = inspect.signature(dist.activation_recompute_forward.__init__).parameters
    if "reserve_first_fp8_module" in params:
        return "activation_recompute_forward(reserve_first_fp8_module=...)"
    if "_recompute" in getattr(quant.autocast, "__slots__", ()) or "_recompute" in \
            inspect.signature(quant.autocast.__init__).parameters:
        return "autocast(_recompute=...)"
    return None


def check(version: Optional[str] = None) -> List[str]:
    """Why the installed TE cannot be patched (empty: it can); never raises: a TE that is missing,
    does not import, or lacks a name this reads is a reason, one line. Imports TE's PyTorch
    modules."""
    try:
        mods = te_modules()
        version = version or te_version()
    except ImportError as e:
        return [f"Transformer Engine's PyTorch part does not import ({e}): nothing to patch"]
    try:
        return _problems(mods, version)
    except Exception as e:  # noqa: BLE001 - a TE unlike the verified ones is a reason, not a crash
        why = " ".join(f"{type(e).__name__}: {e}".split())
        return [f"transformer_engine {version} cannot be read where fp8audit.te looks ({why})"]


def _problems(mods: Dict[str, Any], version: str) -> List[str]:
    fix = upstream_fix(mods)
    if fix == PR_3456:
        return [PR_3456_LINE.format(version=version)]
    if fix is not None:
        return [f"transformer_engine {version} already carries an upstream ownership fix ({fix}); "
                "fp8audit.te leaves it alone"]
    release = releases.get(version)
    if release is None:
        known = ", ".join(releases.verified()) or "none"
        return [f"transformer_engine {version} is not a release fp8audit.te was verified on "
                f"(verified: {known})"]
    table = release.fingerprints
    problems = []
    dataclass = hasattr(mods["quantization"].FP8GlobalStateManager, "quantization_state")
    if dataclass != (release.state_layout == _targets.STATE_DATACLASS):
        problems.append(f"transformer_engine {version}'s FP8 state is not where its verified "
                        f"release keeps it ({release.state_layout})")
    for target in _targets.targets(release.state_layout):
        try:
            _, _, raw = resolve(mods, target)
            found = _fingerprint.of_object(raw)
        except (AttributeError, KeyError, OSError, TypeError, SyntaxError) as e:
            problems.append(f"{target} cannot be read ({type(e).__name__}: {e})")
            continue
        if found != table.get(target):
            problems.append(f"{target} differs from transformer_engine {version}'s verified source")
    return problems
