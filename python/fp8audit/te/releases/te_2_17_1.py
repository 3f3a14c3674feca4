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

from . import EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT, RECOMPUTE_GLOBALS_BEFORE_PR_3284, Release

RELEASE = Release("2.17.1", backports=(EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT),
                  recompute_globals=RECOMPUTE_GLOBALS_BEFORE_PR_3284, fingerprints={
    "quantization:FP8GlobalStateManager.autocast_enter": "b82e18303b8eb483ae1471a6ae3009b938d3c20c0cd606d06ae8223adbe42014",
    "quantization:FP8GlobalStateManager.autocast_exit": "45f4c8b243be15550982f596c326c8555a27ed287996b11e0d8b6546d51aa2d7",
    "quantization:FP8GlobalStateManager.is_first_fp8_module": "5c3caa1be02d8c0f53930a57df63fc5d1e27cebe43b57bd096a661fd6ea2f5f6",
    "quantization:FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute": "0803e377ee4a2d00ef11aceae0b8ed1603056af7a27cb9b218d4260784ccc374",
    "quantization:FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute": "18bbccb4f5fe1c13b7a88ebe6f7752cf4fba8020cf05f099cdbea06ada82264e",
    "quantization:FP8GlobalStateManager.reduce_and_update_fp8_tensors": "5a79f866912a21acaa7d67b28a0b69c87f45421adf114713ce9f1d7cee9428ba",
    "quantization:FP8GlobalStateManager.reset": "4882ec7860f2683ac2a94f1688d61e0ca140f7115a98eded4f8dc0618b44bad2",
    "distributed:activation_recompute_forward.__enter__": "607b229f4364fdb4a7ee889c53cc033d1245d37a926d04f639460e2de489d788",
    "distributed:activation_recompute_forward.__exit__": "c02d764c24288007ddddcc874debea74e61a3ebd45cdbe8344b4403226b6bb14",
    "distributed:get_activation_recompute_contexts": "42471524e7336a51c32fe279474c165f7c16d69dea5ca9237f3af699a962702f",
    "distributed:_CheckpointFunction.forward": "9894e72e05e62efeb3489b43b6b2e8555481e22ce683b013743e21a29f01a07e",
    "distributed:_CheckpointFunction.backward": "b1f203106e1c61d0b2995417211259c7a24dd4dffda29e304aa3af23c8516773",
    "module.layernorm_mlp:_LayerNormMLP.forward": "7be8dc63159c42e8b5974f56a852f982dc35b3e2e3a08d8b45b7844f8f098df6",
    "module.layernorm_mlp:_LayerNormMLP._recompute": "dfff432ac3252312172d51fa38c01d074ea12519f8b9eafa2cb1c9b8b87f0811",
    "quantization:FP8GlobalState": "e6d48a886e65612d42999aa1fcf7249902b1728dcd8d480f759c98fe2e856f21",
    "quantization:FP8GlobalStateManager.get_autocast_state": "ac4f84e8800ca3f45129b40c7d599774165b9be1a0ed9ed68f8232a2671092ec",
    "quantization:FP8GlobalStateManager.set_autocast_state": "a0cf14df7974c345b3bfaf5ee4282fc3fe1a9f3bb91e5e9823a9296895592e2c",
    "quantization:FP8GlobalStateManager.restore_fp8_meta_tensors": "136b57bf46f39db72ace32ca804c78d14e8e4d3bb9f274387d47ee78f07cc959",
    "quantization:autocast.__enter__": "74f174588c54c89afd536b88a561834bc9caf615acc5b9cfced573cc568a29fe",
    "quantization:autocast.__exit__": "d107eea3666dd4c733c8e036ebd9e710a78806d5d0ad23005bfd9916801e0b3f",
    "quantization:_has_delayed_scaling_state": "3a20a3e22904cb759263fa19f5e7097c4bceba87aff737035fc05e269a915242",
    "distributed:checkpoint": "8b1dffb2827722ce1e9ccf64326c0d9cb6ad21475dd8a3a16a925c3bfa1a89a7",
    "distributed:is_fp8_activation_recompute_enabled": "9f68d82838c16448b4e4ab2e716eab3098b0fc4a1406ad89f048fa4a89c0aa1f",
    "distributed:in_fp8_activation_recompute_phase": "f46d8179e86491e4d355daa4b7d6a7937018eea5504a5beaa38eb4c8b66c50b0",
    "module.base:TransformerEngineBaseModule.prepare_forward": "687a9fde72da778eb05a373019abae13f56f285a14d0d8652fbe11e6f6bfe5bb",
    "module.base:TransformerEngineBaseModule.end_forward": "ec2fd9516814374ad667aa75ef1a3a53dd81e12ba673c679c3a7f0ca562ce918",
    "module.linear:_check_fp8_reduce_and_update": "dee1f2a9da8ac330b3c1dfef69652bb9c3a55f9b32ef32989fc27d15f15595fc",
    "module.linear:_Linear.forward": "fbf6107e110cc7849237c05fb5b3988b1b3e950114f00b5283cae0b236ef7e1d",
    "module.layernorm_linear:_LayerNormLinear.forward": "bf1a9b52f20b516edfee6cdb2f9f322910b367825c9af4c81e2b4c5ad9f3022b",
    "module.layernorm_mlp:_LayerNormMLP._forward": "58ead94dc60e0815636c50fe2b4e122a877779b37f289ca2a2a8ff4ac91cf7c9",
})
