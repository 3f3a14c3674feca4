"""TE 2.17.1 (PyPI transformer-engine 2.17.1): before PR #3284 and PR #3394. Of the 30 targets,
2.17.1 differs from 2.19.0 in six (read from the two wheels' sources):
`activation_recompute_forward.__enter__`/`__exit__` and the predicates
`is_fp8_activation_recompute_enabled`/`in_fp8_activation_recompute_phase` (distributed.py: the
recompute globals are `_FP8_ACTIVATION_RECOMPUTE_ENABLED`/`_PHASE`, the first set at the region's
entry to `region and is_fp8_enabled()`), and `_LayerNormLinear.forward`/`_LayerNormMLP._forward`
(new quantizer kinds and distributed weights in 2.19; no ownership change). The patch replaces
the first two and sets the globals by these names; the first to the region alone, as 2.19's
region global: every reader of `is_fp8_activation_recompute_enabled` (base.py:1524, linear.py:416,
grouped_linear.py:471) also requires FP8 (`self.fp8`, `if fp8 or debug`), so they read the same.
Its `checkpoint`, `_CheckpointFunction.forward` and `prepare_forward` are 2.19.0's: the same two
backports. Verified live on the H200: tests/live_te/RESULTS.md ("The fix on TE 2.17.1")."""

from . import (EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT, RECOMPUTE_GLOBALS_BEFORE_PR_3284, Release,
               te_2_19_0)

# 2.19.0's fingerprints but for the six targets that differ.
RELEASE = Release("2.17.1", backports=(EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT),
                  recompute_globals=RECOMPUTE_GLOBALS_BEFORE_PR_3284, fingerprints={
    **te_2_19_0.RELEASE.fingerprints,
    "distributed:activation_recompute_forward.__enter__": "607b229f4364fdb4a7ee889c53cc033d1245d37a926d04f639460e2de489d788",
    "distributed:activation_recompute_forward.__exit__": "c02d764c24288007ddddcc874debea74e61a3ebd45cdbe8344b4403226b6bb14",
    "distributed:is_fp8_activation_recompute_enabled": "9f68d82838c16448b4e4ab2e716eab3098b0fc4a1406ad89f048fa4a89c0aa1f",
    "distributed:in_fp8_activation_recompute_phase": "f46d8179e86491e4d355daa4b7d6a7937018eea5504a5beaa38eb4c8b66c50b0",
    "module.layernorm_linear:_LayerNormLinear.forward": "bf1a9b52f20b516edfee6cdb2f9f322910b367825c9af4c81e2b4c5ad9f3022b",
    "module.layernorm_mlp:_LayerNormMLP._forward": "58ead94dc60e0815636c50fe2b4e122a877779b37f289ca2a2a8ff4ac91cf7c9",
})
