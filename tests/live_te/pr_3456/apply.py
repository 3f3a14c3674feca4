"""Applies TE PR #3456's scheduling to an installed TE 2.20.2 (its Python files), for the live
check of the PR (tests/live_te/pr_3456/README.md). Written anew from what docs/te-pr-3456.md §1
records of the PR's code and §2 of its description, not copied from it. Kept out of the product:
it only ever edits a throw-away TE install.

    python3 apply.py SITE [--diff]

SITE: the directory holding the installed transformer_engine/ (a site-packages, or TE 2.20.2's
pure-Python wheel unpacked). --diff prints the change as a unified diff and writes nothing. Each
edit names the 2.20.2 text it replaces; where that text is not found the expected number of times
(another release, or already applied) nothing is written and the exit status is 1."""

from __future__ import annotations

import difflib
import pathlib
import sys
from typing import Dict, List, Tuple

PKG = "transformer_engine/pytorch/"
MANAGER_METHODS = '''
    # TE PR #3456: the update's new name (TE calls this one; the old name is the same classmethod).
    reduce_and_update_quantization_state = reduce_and_update_fp8_tensors

    @classmethod
    def request_backward_quantization_update(cls, recipe: Optional[Recipe]) -> None:
        """A module's backward in FP8 asks for the backward update: it is marked pending and,
        outside any quantization_backward_scope, one callback is queued on the running task."""
        if recipe is None or not (recipe.delayed() or recipe.custom()):
            return
        if cls.fp8_graph_capturing():
            return
        state = cls.quantization_state
        state.pending_backward_quantization_update = True
        if state.quantization_backward_scope_depth == 0:
            cls._queue_backward_quantization_update_callback()

    @classmethod
    def _queue_backward_quantization_update_callback(cls, task_id: Optional[int] = None) -> None:
        if task_id is None:
            task_id = torch._C._current_graph_task_id()
        if task_id == -1:
            raise RuntimeError("no autograd task runs on this thread for the FP8 backward update")
        state = cls.quantization_state
        if state.backward_quantization_update_callback_task_id == task_id:
            return
        state.backward_quantization_update_callback_task_id = task_id

        def callback() -> None:
            cls._run_backward_quantization_update_callback(task_id)

        try:
            torch.autograd.Variable._execution_engine.queue_callback(callback)
        except BaseException:
            state.backward_quantization_update_callback_task_id = None
            raise

    @classmethod
    def _run_backward_quantization_update_callback(cls, task_id: int) -> None:
        state = cls.quantization_state
        if state.backward_quantization_update_callback_task_id != task_id:
            return
        state.backward_quantization_update_callback_task_id = None
        if state.quantization_backward_scope_depth == 0:
            cls._run_pending_backward_quantization_update()

    @classmethod
    def _run_pending_backward_quantization_update(cls) -> None:
        state = cls.quantization_state
        if not state.pending_backward_quantization_update:
            return
        state.pending_backward_quantization_update = False
        torch.cuda.nvtx.range_push("transformer_engine.reduce_and_update_quantization_state.backward")
        try:
            with torch.no_grad():
                cls.reduce_and_update_quantization_state(forward=False)
        except BaseException:
            state.pending_backward_quantization_update = True
            raise
        finally:
            torch.cuda.nvtx.range_pop()
'''

SCOPE = '''

@contextmanager
def quantization_backward_scope():
    """TE PR #3456: one backward FP8 update for every backward run inside the scope, at the
    outermost exit (or, entered inside a backward, at the end of that autograd task). Every rank
    of the amax reduction group has to enter and leave it."""
    state = FP8GlobalStateManager.quantization_state
    outermost = state.quantization_backward_scope_depth == 0
    in_backward = False
    if outermost:
        state.pending_backward_quantization_update = True
        in_backward = torch._C._current_graph_task_id() != -1
        if in_backward:
            FP8GlobalStateManager._queue_backward_quantization_update_callback()
    state.quantization_backward_scope_depth += 1
    try:
        yield
    finally:
        state.quantization_backward_scope_depth -= 1
        if outermost and not in_backward:
            FP8GlobalStateManager._run_pending_backward_quantization_update()

'''

ASK = "FP8GlobalStateManager.request_backward_quantization_update"
# file -> [(2.20.2's text, the replacement)]
EDITS: Dict[str, List[Tuple[str, str]]] = {
    "quantization.py": [
        ('    "DelayedScalingRequest",\n]',
         '    "DelayedScalingRequest",\n    "quantization_backward_scope",\n]'),
        ("    is_first_fp8_module: bool = False\n",
         "    is_first_fp8_module: bool = False\n"
         "    pending_backward_quantization_update: bool = False\n"
         "    backward_quantization_update_callback_task_id: Optional[int] = None\n"
         "    quantization_backward_scope_depth: int = 0\n"),
        ("\n    @staticmethod\n    def get_unique_autocast_key(",
         MANAGER_METHODS + "\n    @staticmethod\n    def get_unique_autocast_key("),
        ("            cls.reduce_and_update_fp8_tensors(forward=True)",
         "            cls.reduce_and_update_quantization_state(forward=True)"),
        ("\n\n@contextmanager\ndef fp8_model_init(", SCOPE + "\n@contextmanager\ndef fp8_model_init("),
    ],
    "__init__.py": [
        ("from transformer_engine.pytorch.quantization import autocast\n",
         "from transformer_engine.pytorch.quantization import autocast\n"
         "from transformer_engine.pytorch.quantization import quantization_backward_scope\n"),
    ],
    "module/linear.py": [
        ("    reduce_and_update_bwd_fp8_tensors: bool = False\n",
         # Optional[Any], None by default: TE's torch.compile path packs these fields and takes
         # an unsupported type only while it is None (dynamo/custom_op.py).
         "    reduce_and_update_bwd_fp8_tensors: Optional[Any] = None  # PR #3456: the recipe\n"),
        ("                bwd_args.reduce_and_update_bwd_fp8_tensors = _check_fp8_reduce_and_update()",
         "                bwd_args.reduce_and_update_bwd_fp8_tensors = (\n"
         "                    FP8GlobalStateManager.get_fp8_recipe()\n"
         "                )"),
        ("        if reduce_and_update_bwd_fp8_tensors and not is_graph_capturing():\n"
         '            nvtx_range_push(f"{nvtx_label}.reduce_and_update_fp8_tensors")\n'
         "            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)\n"
         '            nvtx_range_pop(f"{nvtx_label}.reduce_and_update_fp8_tensors")\n',
         "        if reduce_and_update_bwd_fp8_tensors:\n"
         f"            {ASK}(reduce_and_update_bwd_fp8_tensors)\n"),
    ],
    "module/layernorm_linear.py": [
        ("                qstate = FP8GlobalStateManager.quantization_state\n"
         "                _first_fp8_module = qstate.is_first_fp8_module\n"
         "                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.is_first_fp8_module()\n"
         "                if in_fp8_activation_recompute_phase():\n"
         "                    qstate.is_first_fp8_module = _first_fp8_module\n",
         "                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.get_fp8_recipe()\n"),
        ("        if ctx.reduce_and_update_bwd_fp8_tensors and not is_graph_capturing():\n"
         '            nvtx_range_push(f"{nvtx_label}.reduce_and_update_fp8_tensors")\n'
         "            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)\n"
         '            nvtx_range_pop(f"{nvtx_label}.reduce_and_update_fp8_tensors")\n',
         "        if ctx.reduce_and_update_bwd_fp8_tensors:\n"
         f"            {ASK}(ctx.reduce_and_update_bwd_fp8_tensors)\n"),
    ],
    "module/layernorm_mlp.py": [
        ("                qstate = FP8GlobalStateManager.quantization_state\n"
         "                _first_fp8_module = qstate.is_first_fp8_module\n"
         "                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.is_first_fp8_module()\n"
         "                if in_fp8_activation_recompute_phase() or is_recomputation:\n"
         "                    qstate.is_first_fp8_module = _first_fp8_module\n",
         "                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.get_fp8_recipe()\n"),
        ("        if ctx.reduce_and_update_bwd_fp8_tensors and not is_graph_capturing():\n"
         "            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)\n",
         "        if ctx.reduce_and_update_bwd_fp8_tensors:\n"
         f"            {ASK}(ctx.reduce_and_update_bwd_fp8_tensors)\n"),
    ],
    "module/grouped_linear.py": [
        ("                ctx.reduce_and_update_bwd_fp8_tensors = (\n"
         "                    ctx.reduce_and_update_bwd_fp8_tensors\n"
         "                    or FP8GlobalStateManager.is_first_fp8_module()\n"
         "                )\n",
         "                ctx.reduce_and_update_bwd_fp8_tensors = FP8GlobalStateManager.get_fp8_recipe()\n"),
        ("        if ctx.reduce_and_update_bwd_fp8_tensors:\n"
         "            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)\n",
         "        if ctx.reduce_and_update_bwd_fp8_tensors:\n"
         f"            {ASK}(ctx.reduce_and_update_bwd_fp8_tensors)\n"),
    ],
    "ops/fuser.py": [
        ("                is_first_module = FP8GlobalStateManager.is_first_fp8_module()\n",
         "                if FP8GlobalStateManager.is_fp8_enabled():\n"
         "                    is_first_module = FP8GlobalStateManager.get_fp8_recipe()\n"),
        ("        if func_ctx.is_first_module and not _is_graph_capturing():\n"
         "            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)\n",
         "        if func_ctx.is_first_module:\n"
         f"            {ASK}(func_ctx.is_first_module)\n"),
    ],
    "distributed.py": [
        ("        # backward does not require entering autocast context because\n"
         "        # backward implementations already retrieve fp8 recipe and\n"
         "        # enablement from stored ctx.\n"
         "        torch.autograd.backward(outputs_with_grad, args_with_grad)\n",
         "        # TE PR #3456 (its description; this hunk was not read): the backward update of the\n"
         "        # nested backward is registered on the outer autograd task.\n"
         "        scope = nullcontext()\n"
         "        if ctx.fp8 and (ctx.fp8_recipe.delayed() or ctx.fp8_recipe.custom()):\n"
         "            scope = quantization_backward_scope()\n"
         "        with scope:\n"
         "            torch.autograd.backward(outputs_with_grad, args_with_grad)\n"),
        ("from .quantization import FP8GlobalStateManager, autocast\n",
         "from .quantization import FP8GlobalStateManager, autocast, quantization_backward_scope\n"),
    ],
}
# Edits counted per file (the same 2.20.2 text can stand in several places: replace them all).
COUNTS = {("module/grouped_linear.py", 0): 2, ("module/grouped_linear.py", 1): 2}


def main(root: pathlib.Path, diff_only: bool) -> int:
    out = []
    changed = {}
    for name, edits in EDITS.items():
        path = root / PKG / name
        if not path.is_file():
            print(f"apply.py: {path} is missing (not TE 2.20.2)", file=sys.stderr)
            return 1
        old = path.read_text()
        new = old
        for i, (before, after) in enumerate(edits):
            want = COUNTS.get((name, i), 1)
            found = new.count(before)
            if found != want:
                print(f"apply.py: {name} edit {i}: found {found} times, expected {want} (not TE 2.20.2, or applied already)",
                      file=sys.stderr)
                return 1
            new = new.replace(before, after)
        changed[path] = new
        out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                    f"a/{PKG}{name}", f"b/{PKG}{name}")
    if diff_only:
        sys.stdout.write("".join(out))
        return 0
    for path, text in changed.items():
        path.write_text(text)
    print(f"TE PR #3456 scheduling applied to {len(changed)} files under {root / PKG}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "--diff"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(pathlib.Path(args[0]), len(args) == 2))
