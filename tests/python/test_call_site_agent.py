"""Explanations point into the job's code, through the agent (issue 35 item 5): `fp8audit run` on
a job whose stand-in Transformer Engine makes an extra forward update from inside one of the job's
functions names that function's file and line in the report. No torch, no GPU: the stand-in's
state manager (TE 2.x's layout, the function te-count wraps) calls the stand-in TE core library
through the test extension (tests/agent/fake_te), whose update calls the agent counts."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pkgutil_fp8audit import AGENT, audit, needs_agent, report

FAKE_EXT = Path(os.environ.get("FP8AUDIT_FAKE_TE_EXT", AGENT.parent.parent / "tests" / "agent" /
                               "fake_te" / "libagent_fake_te_ext.so"))

QUANTIZATION = """
import ctypes
ext = ctypes.CDLL(EXT)
ext.fake_ext_run.argtypes = [ctypes.c_char_p]

class QuantizationState:
    global_amax_buffer = {"forward_a": [1], "backward_a": [1]}
    autocast_arguments = {}

class FP8GlobalStateManager:
    quantization_state = QuantizationState()

    @classmethod
    def split_key_in_buffer(cls, key):
        forward, autocast_key = key.split("_", 1)
        return forward == "forward", autocast_key

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward=True):
        ext.fake_ext_run(b"one")  # one forward and one backward update
"""

JOB = """
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_engine.pytorch
from transformer_engine.pytorch.quantization import FP8GlobalStateManager as M
import fp8audit

def layer_forward():
    M.reduce_and_update_fp8_tensors(forward=True)

with fp8audit.microbatch():
    M.reduce_and_update_fp8_tensors(forward=True)
    layer_forward()
"""


def test_an_extra_update_is_explained_with_the_jobs_file_and_line(tmp_path: Path) -> None:
    needs_agent()
    if not FAKE_EXT.is_file():
        pytest.skip(f"{FAKE_EXT} is not built")
    te = tmp_path / "transformer_engine"
    (te / "pytorch").mkdir(parents=True)
    (te / "__init__.py").write_text('__version__ = "2.20.2"\n')
    (te / "pytorch" / "__init__.py").write_text("from . import quantization\n")
    stand_in = QUANTIZATION.replace("EXT", repr(str(FAKE_EXT)), 1)
    (te / "pytorch" / "quantization.py").write_text(stand_in)
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    r = audit(tmp_path / "t", [str(job)])
    assert r.returncode == 3, (r.stdout, r.stderr)  # 2 updates each way, expected 1
    rows = report(tmp_path / "t")["ranks"][0]["microbatches"]
    assert [(m.get("forward_updates"), m.get("backward_updates")) for m in rows] == [(2, 2)]
    line = JOB.splitlines().index("    M.reduce_and_update_fp8_tensors(forward=True)") + 1
    why = "\n".join(rows[0]["explanations"])
    site = f"Python {tmp_path.name}/job.py:{line} in layer_forward (thread"
    assert why.count(site) == 2, why  # the extra forward update and the extra backward one
