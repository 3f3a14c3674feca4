"""TE 2.18.0 (PyPI transformer-engine 2.18.0): 2.17.1's code where the fix follows it but for
`_LayerNormLinear.forward` and `_LayerNormMLP._forward`, which each add one call setting the amax
reduction group of an input quantizer (sequence parallelism; no ownership state), read from the two
wheels. So 2.17.1's recompute globals and backports. Verified live on the H200:
tests/live_te/RESULTS.md ("TE 2.16.0 and 2.18.0")."""

from . import Release, te_2_17_1

# 2.17.1's fingerprints but for the two targets that differ.
RELEASE = Release("2.18.0", backports=te_2_17_1.RELEASE.backports,
                  recompute_globals=te_2_17_1.RELEASE.recompute_globals, fingerprints={
    **te_2_17_1.RELEASE.fingerprints,
    "module.layernorm_linear:_LayerNormLinear.forward": "70d0b1f65e1a0688533888e5ffd184f066ffd0e91cf0eff0c12cf19aeebafcb3",
    "module.layernorm_mlp:_LayerNormMLP._forward": "78fd06b4114a6c67311931ecc2a91af5fbcc6b8a787cf9b74056e4e46030cda5",
})
