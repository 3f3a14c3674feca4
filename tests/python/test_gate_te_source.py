"""fp8audit.te's fingerprint table of TE 2.20.2 against that release's own source, on its own
(a CTest entry that says skipped where the source is missing, rather than a skip inside a passing
suite)."""

import os
from pathlib import Path

import pytest

from fp8audit.te import _fingerprint, _targets, releases

ROOT = Path(__file__).resolve().parents[2]
REAL_TE = ROOT / ".te" / "src" / "transformer_engine" / "pytorch"


def _te_2_20_2_source(tmp_path: Path) -> Path:
    """TE 2.20.2's transformer_engine/pytorch: unpacked under .te/src, else from its Python wheel
    in the wheelhouse (scripts/setup.sh downloads it: pure Python, 1.2 MB), else a skip, which
    its own CTest entry (python_gate_te_source) reports as one."""
    if REAL_TE.is_dir():
        return REAL_TE
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    wheels = Path(os.environ.get("FP8AUDIT_WHEELHOUSE") or cache / "fp8audit" / "wheels")
    found = sorted(wheels.glob("transformer_engine-2.20.2-py3-none-any.whl"))
    if not found:
        pytest.skip(f"TE 2.20.2's source: neither {REAL_TE} nor its wheel in {wheels}")
    import zipfile

    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extractall(tmp_path)
    return tmp_path / "transformer_engine" / "pytorch"


def test_the_table_matches_te_2_20_2s_source(tmp_path):
    found = _fingerprint.of_source_tree(_te_2_20_2_source(tmp_path), _targets.TARGETS)
    assert found == releases.get("2.20.2").fingerprints
