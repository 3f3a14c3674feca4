"""A pytest plugin for TE's own tests under the live runs: once collection is done, each process
(each pytest-xdist worker) moves into a directory of its own, so tests that write files in the
working directory (test_gpt_checkpointing's checkpoint.pt) do not race. Use with
`-p pytest_workdir` and this folder on PYTHONPATH; FP8AUDIT_PYTEST_WORKDIR names the parent."""

from __future__ import annotations

import os
import tempfile


def pytest_collection_finish(session) -> None:  # noqa: ANN001 - pytest's hook signature
    del session
    parent = os.environ.get("FP8AUDIT_PYTEST_WORKDIR") or None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if parent:
        os.makedirs(parent, exist_ok=True)
    os.chdir(tempfile.mkdtemp(prefix=f"{worker}-", dir=parent))
