"""TE 2.16.0 (PyPI transformer-engine 2.16.0): 2.17.1's code where the fix follows it but for
`_LayerNormLinear.forward` and `_LayerNormMLP._forward`, where 2.17.1 added the cuBLASMp output
aliasing (which tensor is cleared or returned; no ownership state), read from the two wheels. So
2.17.1's recompute globals and backports. Verified live on the H200: tests/live_te/RESULTS.md
("TE 2.16.0 and 2.18.0")."""

from . import Release, te_2_17_1

# 2.17.1's fingerprints but for the two targets that differ.
RELEASE = Release("2.16.0", backports=te_2_17_1.RELEASE.backports,
                  recompute_globals=te_2_17_1.RELEASE.recompute_globals, fingerprints={
    **te_2_17_1.RELEASE.fingerprints,
    "module.layernorm_linear:_LayerNormLinear.forward": "c6f11eaffc43a8472151b3fdd3c510de9f71f0390be2d7da5e5e2eaf1636e670",
    "module.layernorm_mlp:_LayerNormMLP._forward": "ae0eec5741d12e03d605d0ca733a83696d4ac127043aa04e293f8d8d817d8979",
})
