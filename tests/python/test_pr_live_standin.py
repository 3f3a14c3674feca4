"""The TE PR #3456 live check (tests/live_te/pr_3456/) rehearsed on the CPU stand-in following the
PR: pr_live.py's layouts alone and under the agent, and pr_compare.py's table over them, every row
agreeing with the te-3456 model; a row whose counts differ, or a layout that did not run, fails the
table, a malformed line is one error line (exit 2); apply.py refuses a TE that is not 2.20.2 and
writes nothing. run.sh's Megatron-core rows are megatron_live.py's, each modelled by a scenario
but selective-mlp (TE 2.20.2 raises there), and the te-3456 model counts each as docs/te-pr-3456.md
§5 says: the forward as te-2.20, one backward update per microbatch (one backward() call, TE's
reentrant checkpoint inside the scope). (apply.py's edit of TE 2.20.2 itself, run.sh and the
Megatron rows need TE's wheel, megatron-core and a GPU: not here; megatron_compare.py's te-3456
table is rehearsed in test_live_tables.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import pytest

from pkgutil_fp8audit import (BIN, MARK_STANDIN_UPDATES, PYTHON_DIR, ROOT, STANDIN, audit,
                              needs_agent, report)

PR_DIR = ROOT / "tests" / "live_te" / "pr_3456"
SMALL = ["--device", "cpu", "--hidden", "16", "--tokens", "8", "--microbatches", "2"]
ENV = {"PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), str(STANDIN)]),
       "FP8AUDIT_STANDIN_PR_3456": "1", "CUDA_VISIBLE_DEVICES": ""}
# The stand-in's updates are Python: the job marks each for the agent, then runs pr_live.py.
JOB = textwrap.dedent("""
    import runpy
    import sys
    import transformer_engine.pytorch as te
""") + MARK_STANDIN_UPDATES + textwrap.dedent(f"""
    sys.argv = [{str(PR_DIR / 'pr_live.py')!r}] + sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def live_results(tmp_path: Path, *inside: str) -> Path:
    """What run.sh leaves in OUT, made on the stand-in; `inside`: more pr_live.py arguments for
    the runs with the backward inside the autocast."""
    needs_agent()
    out = tmp_path / "out"
    out.mkdir()
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = dict(os.environ, **ENV)
    for backward in ("after", "inside"):
        args = SMALL + ["--backward", backward] + (list(inside) if backward == "inside" else [])
        plain = subprocess.run([sys.executable, str(PR_DIR / "pr_live.py"), *args], env=env,
                               capture_output=True, text=True, timeout=300)
        assert plain.returncode == 0, plain.stderr
        (out / f"plain_{backward}.jsonl").write_text(plain.stdout)
        agent = audit(out / f"agent_{backward}", [str(job), "--markers", *args], **ENV)
        assert agent.returncode in (0, 3), agent.stderr
        (out / f"agent_{backward}.jsonl").write_text(agent.stdout)
        rep = report(out / f"agent_{backward}")
        (out / f"agent_{backward}.json").write_text(json.dumps(rep))
    return out


def compare(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PR_DIR / "pr_compare.py"), str(out), "--fp8audit",
                           str(BIN), "--microbatches", "2"], capture_output=True, text=True,
                          timeout=300)


def rows(table: str) -> List[List[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| after") or line.startswith("| inside")]


def test_every_layout_agrees_with_the_te_3456_model_and_the_report_chose_it(tmp_path: Path) -> None:
    result = compare(live_results(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result.stdout)
    assert len(table) == 2 * 11, result.stdout
    assert all(row[-1] == "yes" and row[-2] == "yes" for row in table), result.stdout
    by_layout = {(row[0], row[1]): row[2] for row in table}
    # What the PR changes, as the model and the stand-in both count it:
    assert by_layout[("after", "decoder-28x7")] == "29/1"
    assert by_layout[("after", "two-backward")] == "1/2"
    assert by_layout[("after", "two-backward-scope")] == "1/1"
    assert "semantics te-3456 (from scheduling)" in result.stdout


def test_a_row_whose_counts_differ_fails_the_table(tmp_path: Path) -> None:
    out = live_results(tmp_path)
    plain = out / "plain_after.jsonl"
    lines = plain.read_text().splitlines()
    lines[0] = lines[0].replace('"backward": 1', '"backward": 2')
    plain.write_text("\n".join(lines) + "\n")
    result = compare(out)
    assert result.returncode == 1, result.stdout + result.stderr
    assert rows(result.stdout)[0][-1] == "NO", result.stdout


def test_a_layout_that_did_not_run_fails_the_table_and_a_malformed_line_is_one_error(
        tmp_path: Path) -> None:
    out = live_results(tmp_path, "--layout", "none")  # as a run that died after its first layout
    result = compare(out)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "| inside | two-backward | 0 of 2 microbatches | 0 of 2 | | | | NO |" in result.stdout
    plain = out / "plain_after.jsonl"
    plain.write_text(plain.read_text().replace('"pending"', '"other"', 1))
    result = compare(out)
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip().splitlines() == [
        f"pr_compare.py: {plain}:1: no pending"], result.stderr


def test_apply_refuses_a_te_that_is_not_2_20_2_and_writes_nothing(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(STANDIN / "transformer_engine", site / "transformer_engine")
    before = {p: p.read_bytes() for p in site.rglob("*.py")}
    result = subprocess.run([sys.executable, str(PR_DIR / "apply.py"), str(site)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "not TE 2.20.2" in result.stderr
    assert {p: p.read_bytes() for p in site.rglob("*.py")} == before


MEGATRON = ROOT / "tests" / "live_te" / "scenarios" / "megatron"


def run_sh_megatron() -> tuple:
    """run.sh's Megatron rows and its agents' (name, flags, row)."""
    text = (PR_DIR / "run.sh").read_text()
    (rows,) = re.findall(r"^mc_rows=\(([^)]*)\)", text, re.M)
    agents = re.findall(r'"(agent_\w+)\|([^|"]*)\|([\w-]+)"', text)
    return rows.split(), agents


def test_run_sh_parses_and_names_megatron_rows_with_scenarios() -> None:
    assert subprocess.run(["bash", "-n", str(PR_DIR / "run.sh")]).returncode == 0
    import megatron_live

    rows, agents = run_sh_megatron()
    assert rows and set(rows) <= set(megatron_live.ROWS), rows
    assert [r for r in rows if not (MEGATRON / f"{r}.textproto").is_file()] == ["selective-mlp"]
    assert {row for _, _, row in agents} <= set(rows) and len(agents) == 3, agents
    assert all(("fix" in name) == (flags == "--fix-te") for name, flags, _ in agents), agents


def model(scenario: Path, semantics: str) -> List[tuple]:
    done = subprocess.run([str(BIN), "model", str(scenario), "--semantics", semantics,
                           "--microbatches", "8", "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 or done.stdout.strip(), done.stderr
    return [(m.get("forward_updates", 0), m.get("backward_updates", 0))
            for m in json.loads(done.stdout)["microbatches"]]


def test_the_te_3456_model_of_run_sh_megatron_rows_updates_backward_once() -> None:
    if not BIN.is_file():
        pytest.skip(f"{BIN} is not built")
    for row in run_sh_megatron()[0]:
        scenario = MEGATRON / f"{row}.textproto"
        if not scenario.is_file():
            continue
        pr, before = model(scenario, "te-3456"), model(scenario, "te-2.20")
        assert [f for f, _ in pr] == [f for f, _ in before], row
        assert [b for _, b in pr] == [1] * 8, (row, pr)
