"""The demo's side-by-side table (runtime/demo/side_by_side.py) on real output: fp8-repro run under
`fp8audit run` with TE's ownership and with the fixed one, the two JSON reports, and each of the
table's labels checked against the microbatch it names (issue 35 item 1: passing rows were dropped
and the labels shifted onto other microbatches' counts)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from pkgutil_fp8audit import BIN, ROOT, needs_agent

BUILDER = ROOT / "runtime" / "demo" / "side_by_side.py"
REPRO = Path(os.environ.get("FP8AUDIT_REPRO", BIN.parent / "fp8-repro"))
FLAGS = ["--layout", "all", "--seeds", "2", "--microbatches", "3", "--accumulation", "2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Tuple[Path, Path]]:
    """ownership -> (fp8-repro's output, the audit's JSON report)."""
    needs_agent()
    if not REPRO.is_file():
        pytest.skip(f"{REPRO} is not built (no libtorch)")
    d = tmp_path_factory.mktemp("demo")
    out = {}
    for ownership in ("te-legacy", "fixed"):
        run = subprocess.run([str(BIN), "run", "--out", str(d / ownership), "--", str(REPRO),
                              "--semantics", ownership, *FLAGS],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == (3 if ownership == "te-legacy" else 0), run.stderr
        (d / f"{ownership}.repro.txt").write_text(run.stdout)
        rep = subprocess.run([str(BIN), "report", str(d / ownership), "--format", "json",
                              "--no-progress"], capture_output=True, text=True, timeout=120)
        (d / f"{ownership}.json").write_text(rep.stdout)
        out[ownership] = (d / f"{ownership}.repro.txt", d / f"{ownership}.json")
    return out


def _build(runs, te_json: Path = None) -> subprocess.CompletedProcess:
    te_repro, te_report = runs["te-legacy"]
    fixed_repro, fixed_report = runs["fixed"]
    return subprocess.run([sys.executable, str(BUILDER), str(te_repro), str(te_json or te_report),
                           str(fixed_repro), str(fixed_report)],
                          capture_output=True, text=True, timeout=120)


def _own_counts(repro: Path) -> Dict[Tuple[str, int, int], str]:
    """The runtime's own count of each (layout, seed, microbatch), read here independently."""
    counts = {}
    for line in repro.read_text().splitlines():
        m = re.match(r"^(\S+)\s+seed=(\d+) updates/microbatch \(fwd/bwd\): ([0-9/ ]+)\|", line)
        if m:
            for i, pair in enumerate(m.group(3).split()):
                counts[(m.group(1), int(m.group(2)), i)] = pair
    return counts


def _rows(text: str) -> List[List[str]]:
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["layout", "seed", "mb"], text
    return [line.split() for line in lines[1:] if line and not line.startswith("agent and")]


def test_every_label_of_the_table_carries_its_own_microbatchs_counts(runs):
    r = _build(runs)
    assert r.returncode == 0, r.stdout + r.stderr
    te, fixed = _own_counts(runs["te-legacy"][0]), _own_counts(runs["fixed"][0])
    assert len(te) == 6 * 2 * 3 and te.keys() == fixed.keys()
    seen = []
    for row in _rows(r.stdout):
        layout, seed, mb = row[0], int(row[1]), row[2]
        first, _, last = mb.partition("-")
        for i in range(int(first), int(last or first) + 1):
            key = (layout, seed, i)
            seen.append(key)
            assert row[3] == te[key] and row[4] == te[key], (key, row)  # runtime, agent
            assert row[6] == fixed[key] and row[7] == fixed[key], (key, row)
            assert row[5] == ("PASS" if te[key] == "1/1" else "FAIL"), (key, row)
            assert row[8] == "PASS", (key, row)
    assert seen == sorted(te, key=list(te).index)  # every microbatch once, in run order
    assert {te[k] for k in te} > {"1/1"}  # TE's ownership gave other counts too: labels matter
    assert r.stdout.splitlines()[-1] == \
        "agent and runtime agree on all 36 microbatches under both ownerships"


def test_a_microbatch_missing_from_a_report_is_a_disagreement_never_a_shifted_table(runs, tmp_path):
    report = json.loads(runs["te-legacy"][1].read_text())
    del report["ranks"][0]["microbatches"][0]  # as when the old demo dropped passing rows
    short = tmp_path / "short.json"
    short.write_text(json.dumps(report))
    r = _build(runs, short)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "(agent differs)" in r.stdout
    assert "missing" in r.stdout  # the last microbatch has no count left in the report
    assert r.stdout.splitlines()[-1].startswith("agent and runtime disagree on ")


def test_unreadable_input_is_one_line_and_exit_2(runs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    r = _build(runs, bad)
    assert r.returncode == 2
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("side_by_side.py: ")
