"""TE 2.19.0 (PyPI transformer-engine 2.19.0): before PR #3394. Its 30 targets match 2.20.2's but
for four (read from the two wheels' sources): `TransformerEngineBaseModule.prepare_forward`
stashes for recompute only `if self.training` (module/base.py), `checkpoint` enters the
checkpoint function even without grad and `_CheckpointFunction.forward` opens a recompute frame
whatever its inputs need (distributed.py), and `_Linear.forward` returns its weight workspace
(no ownership change). The fix backports the first three (_backports.py).
Verified live on the H200: tests/live_te/RESULTS.md ("The fix on TE 2.19.0")."""

from . import EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT, Release, te_2_20_2

# 2.20.2's fingerprints but for the targets that differ.
RELEASE = Release("2.19.0", backports=(EVAL_MODULE_STASH, INELIGIBLE_CHECKPOINT), fingerprints={
    **te_2_20_2.RELEASE.fingerprints,
    "distributed:_CheckpointFunction.forward": "9894e72e05e62efeb3489b43b6b2e8555481e22ce683b013743e21a29f01a07e",
    "distributed:checkpoint": "8b1dffb2827722ce1e9ccf64326c0d9cb6ad21475dd8a3a16a925c3bfa1a89a7",
    "module.base:TransformerEngineBaseModule.prepare_forward": "687a9fde72da778eb05a373019abae13f56f285a14d0d8652fbe11e6f6bfe5bb",
    "module.linear:_Linear.forward": "fbf6107e110cc7849237c05fb5b3988b1b3e950114f00b5283cae0b236ef7e1d",
})
