"""Helpers for the suites that run fp8audit's executable and agent: where they are, a Python with
python/ on its path, a job run under `fp8audit run` and its JSON report."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "python"
BIN = Path(os.environ.get("FP8AUDIT_BIN", ROOT / "build" / "bin" / "fp8audit"))
AGENT = BIN.parent.parent / "lib" / "libfp8audit.so"


def needs_agent() -> None:
    if not BIN.is_file() or not AGENT.is_file():
        pytest.skip(f"{BIN} or {AGENT} is not built")


def needs_ops() -> None:
    if os.environ.get("FP8AUDIT_OPS_LIB"):
        return
    if not list(ROOT.glob("build*/lib/libfp8audit_ops.so")):
        pytest.skip("libfp8audit_ops.so is not built (no torch)")


def env(**extra: str) -> Dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in [str(PYTHON_DIR), e.get("PYTHONPATH", "")] if p)
    e["FP8AUDIT_BIN"] = str(BIN)
    e.update(extra)
    return e


def python(code: str, timeout: int = 300, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env(**extra), capture_output=True,
                          text=True, timeout=timeout)


def report(out: Path) -> Dict[str, Any]:
    result = subprocess.run([str(BIN), "report", str(out), "--format", "json", "--no-progress"],
                            capture_output=True, text=True, timeout=120)
    return json.loads(result.stdout)


def counts(rep: Dict[str, Any]) -> List[Tuple[int, int]]:
    """(forward, backward) updates of each microbatch of the only trace."""
    assert len(rep["ranks"]) == 1, rep
    return [(m.get("forward_updates", 0), m.get("backward_updates", 0))
            for m in rep["ranks"][0].get("microbatches", [])]


def audit(out: Path, args: List[str], binary: Path = BIN, timeout: int = 600,
          **extra: str) -> subprocess.CompletedProcess:
    """`fp8audit run --out OUT -- python ARGS...`."""
    return subprocess.run([str(binary), "run", "--out", str(out), "--", sys.executable, *args],
                          env=env(**extra), capture_output=True, text=True, timeout=timeout)


STANDIN = ROOT / "tests" / "python" / "standin"

# Job lines, after TE's import: on a GPU the agent sees TE's own updates (its C entry point); the
# stand-in's are Python, so the job marks each one for the agent.
MARK_STANDIN_UPDATES = """
import fp8audit
import fp8audit.hook
M = te.quantization.FP8GlobalStateManager
update, names = fp8audit.hook.update_names(M)  # TE PR #3456: the same function by two names
def marked(cls, forward=True):
    n = fp8audit.hook.pending_updates(cls, forward)[0]  # DelayedScaling amaxes to reduce
    if n:
        fp8audit.update("forward" if forward else "backward", n)
    return update(cls, forward)
for name in names:
    setattr(M, name, classmethod(marked))
"""


def audit_standin_job(tmp_path: Path, job: str, *args: str) -> Dict[str, Any]:
    """The JSON report of `job` (Python source) run with `args` on TE's CPU stand-in under
    `fp8audit run`, with its exit status and stderr added (returncode, stderr). --patch (the fix)
    needs the built model library: skipped outside CTest."""
    needs_agent()
    if "--patch" in args and not os.environ.get("FP8AUDIT_MODEL_LIB"):
        pytest.skip("FP8AUDIT_MODEL_LIB (the built model library) is not set: run through CTest")
    script = tmp_path / "job.py"
    script.write_text(job)
    # The stand-in runs on the CPU: on a GPU host torch.cuda would carry the hook's marks.
    r = audit(tmp_path / "t", [str(script), *args], CUDA_VISIBLE_DEVICES="",
              PYTHONPATH=os.pathsep.join([str(PYTHON_DIR), str(STANDIN)]))
    rep = report(tmp_path / "t")
    rep["returncode"], rep["stderr"] = r.returncode, r.stderr
    return rep
