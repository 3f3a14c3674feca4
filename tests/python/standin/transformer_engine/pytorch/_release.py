"""Which TE release's behaviour the stand-in follows where releases differ (set by tests).
BEFORE_PR_3394: TE 2.19's stash pairing, before PR #3394 (TE 2.20): prepare_forward stashes for
recompute only in training mode, and a reentrant checkpoint entered without grad, or none of
whose inputs needs grad, still opens a recompute frame.
BEFORE_PR_3284: TE 2.17's recompute globals, before PR #3284 (TE 2.19), with BEFORE_PR_3394:
`_FP8_ACTIVATION_RECOMPUTE_ENABLED` is set at the region's entry to `region and FP8 enabled`
(so a module under an autocast opened inside the checkpointed callable stashes nothing), beside
`_FP8_ACTIVATION_RECOMPUTE_PHASE`.
BEFORE_PR_2759: TE 2.14's global FP8 state, before PR #2759 (TE 2.15) moved it into the
FP8GlobalState dataclass: class attributes of FP8GlobalStateManager (IS_FIRST_FP8_MODULE,
AUTOCAST_DEPTH, FP8_RECIPE, fp8_tensors_recompute_buffer, ...); FP8GlobalStateManager.reset()
lays the state out as the flag says.
COMPUTE_CAPABILITY: the device the stand-in's TE believes it runs on, for its default recipe
(quantization.get_default_fp8_recipe, as TE 2.20.2's: MXFP8 on 10.x and 11.x, current scaling on
12.0 and later, DelayedScaling before 10.0).
WITH_PR_3456: TE PR #3456 (docs/te-pr-3456.md), on top of 2.20.2: every FP8 module's backward asks
FP8GlobalStateManager.request_backward_quantization_update(recipe) instead of reading the
first-module flag, one callback per autograd task runs the backward update, and
`quantization_backward_scope` exists (only then). Default: FP8AUDIT_STANDIN_PR_3456=1 in the
environment when this module is imported (so a job started as a subprocess can turn it on); a test
that sets it calls FP8GlobalStateManager.reset() (conftest.reset_te) to lay the PR's API out."""

import os

BEFORE_PR_3394 = False
BEFORE_PR_3284 = False
BEFORE_PR_2759 = False
COMPUTE_CAPABILITY = (9, 0)
WITH_PR_3456 = os.environ.get("FP8AUDIT_STANDIN_PR_3456") == "1"
