"""TE 2.20.2 (PyPI transformer-engine 2.20.2): carries PR #3394, so the fix needs no backport.
Fingerprints: `python -m fp8audit.te.fingerprint` on the wheel's transformer_engine/pytorch.
Verified live on the H200: tests/live_te/RESULTS.md ("The fix on TE 2.20.2")."""

from . import Release

RELEASE = Release("2.20.2", fingerprints={
    "quantization:FP8GlobalStateManager.autocast_enter": "b82e18303b8eb483ae1471a6ae3009b938d3c20c0cd606d06ae8223adbe42014",
    "quantization:FP8GlobalStateManager.autocast_exit": "45f4c8b243be15550982f596c326c8555a27ed287996b11e0d8b6546d51aa2d7",
    "quantization:FP8GlobalStateManager.is_first_fp8_module": "5c3caa1be02d8c0f53930a57df63fc5d1e27cebe43b57bd096a661fd6ea2f5f6",
    "quantization:FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute": "0803e377ee4a2d00ef11aceae0b8ed1603056af7a27cb9b218d4260784ccc374",
    "quantization:FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute": "18bbccb4f5fe1c13b7a88ebe6f7752cf4fba8020cf05f099cdbea06ada82264e",
    "quantization:FP8GlobalStateManager.reduce_and_update_fp8_tensors": "5a79f866912a21acaa7d67b28a0b69c87f45421adf114713ce9f1d7cee9428ba",
    "quantization:FP8GlobalStateManager.reset": "4882ec7860f2683ac2a94f1688d61e0ca140f7115a98eded4f8dc0618b44bad2",
    "distributed:activation_recompute_forward.__enter__": "f264254e95c5a7f00be1636b6a17a18c8df809852b4dc0d29fa584758189d71d",
    "distributed:activation_recompute_forward.__exit__": "cd805dd8acda45ce406d54d3c7583af0a0c075ddcee4a8fd0961e6c9daecbd37",
    "distributed:get_activation_recompute_contexts": "42471524e7336a51c32fe279474c165f7c16d69dea5ca9237f3af699a962702f",
    "distributed:_CheckpointFunction.forward": "4dca46cafb24fb4bdc6911c9f4f95e4cf6eb67c49672a47ed6679d8b483093d5",
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
    "distributed:checkpoint": "a3d4f30baa63769393d2807bf504bf4953baeca9def03327a3709bdf5cb3ff65",
    "distributed:is_fp8_activation_recompute_enabled": "15a84477ce83a18aae62c7272a1b0e4c853d78a7f03f9d52ddc9477f05640ce7",
    "distributed:in_fp8_activation_recompute_phase": "78605594b4ad3320132a26779e3ccf4b3bd30a4ddfbd92bceba7238e793a9fbc",
    "module.base:TransformerEngineBaseModule.prepare_forward": "9ef8eddde99c17a420abd2464a36ec898dbbcc5e13bc742d7f102d98218f18ea",
    "module.base:TransformerEngineBaseModule.end_forward": "ec2fd9516814374ad667aa75ef1a3a53dd81e12ba673c679c3a7f0ca562ce918",
    "module.linear:_check_fp8_reduce_and_update": "dee1f2a9da8ac330b3c1dfef69652bb9c3a55f9b32ef32989fc27d15f15595fc",
    "module.linear:_Linear.forward": "5c00d310dda916d2d58c87366e55478ad0c81831bb2aaadea156c82f3955868e",
    "module.layernorm_linear:_LayerNormLinear.forward": "b108fbd1ed150fae2a824773f193b068056705cb51d1c485a130618e3655524b",
    "module.layernorm_mlp:_LayerNormMLP._forward": "3f9045d4720bf2a6b39f9b6225b3f1cb92057bb229d2fb27c1e6ee7cc371186d",
})
