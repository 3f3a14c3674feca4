"""A pytest plugin for TE's own tests under the live runs: once collection is done, each process
(each pytest-xdist worker) moves into a directory of its own, so tests that write files in the
working directory (test_gpt_checkpointing's checkpoint.pt) do not race. Use with
`-p pytest_workdir` and this folder on PYTHONPATH; FP8AUDIT_PYTEST_WORKDIR names the parent.
FP8AUDIT_RECOMPILE_LIMIT=N raises torch._dynamo's recompile limit in each process (te_suite.sh's
RECOMPILE_LIMIT): TE's torch.compile'd helpers then stay compiled across many test shapes."""

from __future__ import annotations

import os
import tempfile


def pytest_collection_finish(session) -> None:  # noqa: ANN001 - pytest's hook signature
    del session
    _raise_recompile_limit()  # again: test_numerics.py sets its own (16) when it is imported
    parent = os.environ.get("FP8AUDIT_PYTEST_WORKDIR") or None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if parent:
        os.makedirs(parent, exist_ok=True)
    os.chdir(tempfile.mkdtemp(prefix=f"{worker}-", dir=parent))


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook signature
    del config
    _raise_recompile_limit()


def _raise_recompile_limit() -> None:
    limit = os.environ.get("FP8AUDIT_RECOMPILE_LIMIT")
    if not limit:
        return
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):  # torch >= 2.6, and before
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, int(limit))
