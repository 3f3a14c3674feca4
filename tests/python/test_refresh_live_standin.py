"""tests/live_te/refresh_live.py (issue 36 item 2's live rows) rehearsed on TE's CPU stand-in: the
script's truth (its own count of weight-cache re-quantizations while its backward runs) equals the
audit's weight_refreshes per microbatch, for TE's checkpoint replaying is_first_microbatch (a
refresh per layer on each step's first microbatch), the backward inside the autocast, and no
checkpoint (none: nothing recomputed under a recipe without global updates, NOTHING AUDITED, exit
2, and no refresh counted). (The same script on the GPU: tests/live_te/RESULTS.md.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List

import pytest

from pkgutil_fp8audit import PYTHON_DIR, ROOT, STANDIN, audit, needs_agent, report

SCRIPT = ROOT / "tests" / "live_te" / "refresh_live.py"
ENV = {"PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), str(STANDIN)]), "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize("args, expected, code", [
    (["--recipe", "current", "--checkpoint", "te"], [3, 0, 3, 0], 0),
    (["--recipe", "block", "--checkpoint", "te", "--backward", "inside"], [3, 0, 3, 0], 0),
    (["--recipe", "current", "--checkpoint", "none"], [0, 0, 0, 0], 2),
])
def test_the_audit_counts_the_refreshes_the_script_counts(tmp_path: Path, args: List[str],
                                                         expected: List[int], code: int) -> None:
    needs_agent()
    r = audit(tmp_path / "t", [str(SCRIPT), "--device", "cpu", "--hidden", "16", "--markers",
                               *args], **ENV)
    assert r.returncode == code, r.stderr
    truth = json.loads(r.stdout.strip().splitlines()[-1])
    assert truth["error"] == "", truth
    assert [row["refreshes"] for row in truth["rows"]] == expected
    rep = report(tmp_path / "t")
    assert len(rep["ranks"]) == 1, rep
    agent = [m.get("weight_refreshes", 0) for m in rep["ranks"][0]["microbatches"]]
    assert agent == expected, (agent, truth["rows"])
