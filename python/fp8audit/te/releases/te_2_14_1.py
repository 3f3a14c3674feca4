"""TE 2.14.1 (PyPI transformer-engine 2.14.1): before PR #2759 (TE 2.15 moved the global FP8 state
into the FP8GlobalState dataclass), PR #3284 and PR #3394. Read from the wheel's source: its
global state is class attributes of FP8GlobalStateManager (IS_FIRST_FP8_MODULE, AUTOCAST_DEPTH,
FP8_RECIPE, fp8_tensors_recompute_buffer, ...), `autocast` is a generator function, a module's
stash guard is `fp8_meta["recipe"].delayed()`, and _Linear.forward reads the first-module flag
itself. Every ownership decision is 2.17.1's: each target reads the same statements as 2.17.1's
with the state by its class-attribute name, `activation_recompute_forward.__exit__`, the two
recompute predicates, `checkpoint` and `_CheckpointFunction` are 2.17.1's unchanged (so 2.17.1's
recompute global names and both backports). The patch takes the class-attribute state layout
(_state_layouts.py). Verified live on the H200: tests/live_te/RESULTS.md ("TE 2.14.1")."""

from . import (EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT, RECOMPUTE_GLOBALS_BEFORE_PR_3284,
               STATE_CLASS_ATTRIBUTES, Release)

RELEASE = Release("2.14.1", backports=(EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT),
                  recompute_globals=RECOMPUTE_GLOBALS_BEFORE_PR_3284,
                  state_layout=STATE_CLASS_ATTRIBUTES, fingerprints={
    "quantization:FP8GlobalStateManager.autocast_enter": "cfbda91e7c5c25894588b5f1fb328a9247290c6980e2d188d2a895b009b72d16",
    "quantization:FP8GlobalStateManager.autocast_exit": "57a0b60b4bfe0354cd9f6676203017ddb939dc2edbefa9b3649dce04a67c1704",
    "quantization:FP8GlobalStateManager.is_first_fp8_module": "da7f8ccfd0fb3fad36ea2d839f15337234425ba99dfe4ecffeee06da99be4ac9",
    "quantization:FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute": "c131a772c8ad35751c10fc31378908ee68ee8be33236f537c46790756f75811a",
    "quantization:FP8GlobalStateManager.get_old_fp8_meta_tensors_for_recompute": "ad957223ee797868dfe75322bee027925306e31d5831ab7ef00152909e3dd48d",
    "quantization:FP8GlobalStateManager.reduce_and_update_fp8_tensors": "e5ab121d986be9fc2b437fb7fa9227d8d323e6048948a199ff8b1916b7034bb3",
    "quantization:FP8GlobalStateManager.reset": "e58fb945b528b929bde3f0685e6f1bb461dd0f834c2235dc32491e4288239840",
    "distributed:activation_recompute_forward.__enter__": "c6c5643a6e42d14e842e8456e20370b244d3f0d28baa033b75508c95012e05a2",
    "distributed:activation_recompute_forward.__exit__": "c02d764c24288007ddddcc874debea74e61a3ebd45cdbe8344b4403226b6bb14",
    "distributed:get_activation_recompute_contexts": "42471524e7336a51c32fe279474c165f7c16d69dea5ca9237f3af699a962702f",
    "distributed:_CheckpointFunction.forward": "9894e72e05e62efeb3489b43b6b2e8555481e22ce683b013743e21a29f01a07e",
    "distributed:_CheckpointFunction.backward": "b1f203106e1c61d0b2995417211259c7a24dd4dffda29e304aa3af23c8516773",
    "module.layernorm_mlp:_LayerNormMLP.forward": "6264006c26778cfe0acfe87829cff339dbdaac27ca1f24bc3010c518b122fc0b",
    "module.layernorm_mlp:_LayerNormMLP._recompute": "9799eef6baaf34832cd0253bcb3e669ebceba4fd67dc14656f7878e537faa48e",
    "quantization:autocast": "a9c9f60209f95ee932214ff9f3987fdcfe75b7ea8b9f75521d3993c5e5b9cd13",
    "quantization:FP8GlobalStateManager.get_autocast_state": "7ec660aa806163a6a10faad0a745d716a03bd553f3023b21b79fb06696c08e0e",
    "quantization:FP8GlobalStateManager.set_autocast_state": "2c4612b8339960622ff0b9725d8ddd0c9d288005f42c93db8ac2f8cbeac6abc4",
    "quantization:FP8GlobalStateManager.restore_fp8_meta_tensors": "1a21f5bfc1a62b1eeb554f6c04f21a09117f15d07fb02d866f533f900c6d3e11",
    "distributed:checkpoint": "8b1dffb2827722ce1e9ccf64326c0d9cb6ad21475dd8a3a16a925c3bfa1a89a7",
    "distributed:is_fp8_activation_recompute_enabled": "9f68d82838c16448b4e4ab2e716eab3098b0fc4a1406ad89f048fa4a89c0aa1f",
    "distributed:in_fp8_activation_recompute_phase": "f46d8179e86491e4d355daa4b7d6a7937018eea5504a5beaa38eb4c8b66c50b0",
    "module.base:TransformerEngineBaseModule.prepare_forward": "200fff4d7bdee33105000bf1e5bda3185fc342c25fe843bbe64ef5f5efa38f3e",
    "module.base:TransformerEngineBaseModule.end_forward": "f25140fbce52e4e6564b489fe5e2a25b6d32fbf7c5c0fe2524fcb71c012f5cbc",
    "module.linear:_Linear.forward": "3f1af52f9029ef8d91759108649bb3870483fbe6f351f2a218357a1c43ed25dc",
    "module.layernorm_linear:_LayerNormLinear.forward": "a7d0be3621cff7aa3487ad8147ec4d5355690d61d709d6de87b3d998e3b5ce11",
    "module.layernorm_mlp:_LayerNormMLP._forward": "2d2ace093f464243a21dbbafce1aacafdf7a7a0cb32ee872b17295a6bfc6f388",
})
