"""`pytest --fp8audit` (fp8audit.pytest_plugin): the session re-run under the agent, each test
judged by the microbatches it recorded (1/1, or what its marker declares), the report's counts in
the failure, fixtures' microbatches no test's, the plugin inert without the flag, one clear line
when the executable is missing."""

import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, Tuple

from pkgutil_fp8audit import BIN, ROOT, env, needs_agent, needs_ops, report

SUITE = textwrap.dedent("""
    import pytest, fp8audit

    def microbatch(forward=1, backward=1):
        with fp8audit.microbatch():
            fp8audit.update("forward", forward)
            fp8audit.update("backward", backward)

    def test_one_one():
        microbatch()
        microbatch()

    def test_two_forward_updates_in_the_second():
        microbatch()
        microbatch(forward=2)

    @pytest.mark.fp8audit(forward=2, backward=1)
    def test_declares_two_forward():
        microbatch(forward=2)

    @pytest.mark.fp8audit(forward=1, backward=1)
    def test_declares_but_records_nothing():
        pass

    def test_records_nothing():
        pass

    def test_fails_on_its_own():
        microbatch(forward=3)
        assert False, "its own failure"

    @pytest.fixture
    def warm_up():
        microbatch(forward=5)
        yield
        microbatch(backward=4)

    def test_after_a_fixture_microbatch(warm_up):
        microbatch()

    def test_after_a_fixture_teardown_microbatch():
        microbatch()
""")


def run_tests(tmp_path: Path, source: str, *flags: str, **extra: str) -> Tuple[
        subprocess.CompletedProcess, Dict[str, str]]:
    """Runs `source` as test_x.py with the plugin and `flags`; (result, {test: "passed" or its
    failure text})."""
    (tmp_path / "test_x.py").write_text(source)
    junit = tmp_path / "junit.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "fp8audit.pytest_plugin", "-p", "no:cacheprovider",
         f"--junitxml={junit}", *flags, "test_x.py"],
        cwd=tmp_path, env=env(**extra), capture_output=True, text=True, timeout=600)
    outcomes: Dict[str, str] = {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            failure = case.find("failure")
            outcomes[case.get("name", "")] = "passed" if failure is None else \
                (failure.get("message", "") + "\n" + (failure.text or ""))
    return result, outcomes


def run_suite(tmp_path: Path, *flags: str, **extra: str) -> Tuple[subprocess.CompletedProcess,
                                                                   Dict[str, str]]:
    """Runs SUITE with the plugin and `flags`, as run_tests does."""
    return run_tests(tmp_path, SUITE, *flags, **extra)


def test_fp8audit_fails_exactly_the_tests_whose_microbatches_miss_their_expectation(tmp_path):
    needs_agent()
    result, outcomes = run_suite(tmp_path, "--fp8audit", "--fp8audit-out", str(tmp_path / "t"))
    assert result.returncode == 1, result.stdout + result.stderr
    passed = {name for name, text in outcomes.items() if text == "passed"}
    assert passed == {"test_one_one", "test_declares_two_forward", "test_records_nothing",
                      "test_after_a_fixture_microbatch",
                      "test_after_a_fixture_teardown_microbatch"}, outcomes
    two = outcomes["test_two_forward_updates_in_the_second"]
    assert "1 of 2 microbatches of this test did not make 1 forward / 1 backward" in two, two
    assert "(the test's 2nd): forward 2, backward 1" in two, two
    assert "- forward update 2, expected 1" in two, two  # the report's explanation
    assert "footer" not in two, two  # the running process's trace has none yet: not a failure
    assert "recorded no microbatch" in outcomes["test_declares_but_records_nothing"]
    own = outcomes["test_fails_on_its_own"]
    assert "its own failure" in own and "fp8audit:" not in own, own
    assert f"fp8audit: traces in {tmp_path / 't'}" in result.stderr
    assert list((tmp_path / "t").glob("*.fp8trace")), "the session's trace is kept"


def test_the_session_report_is_not_repeated_and_temporary_traces_go_only_when_it_passes(tmp_path):
    needs_agent()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result, outcomes = run_suite(tmp_path, "--fp8audit", TMPDIR=str(scratch))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "test_two_forward_updates_in_the_second" in outcomes
    assert "fp8audit report:" not in result.stderr + result.stdout  # pytest's report only
    assert "job total:" not in result.stderr + result.stdout
    # A failing session keeps the traces its failures name, and says where.
    kept = list(scratch.glob("fp8audit-pytest-*"))
    assert len(kept) == 1 and list(kept[0].glob("*.fp8trace")), result.stderr
    assert f"fp8audit: traces kept in {kept[0]} (the session failed" in result.stderr
    trace = outcomes["test_two_forward_updates_in_the_second"].split("trace: ")[1].split()[0]
    assert Path(trace).is_file(), trace  # the failure's trace path still exists
    # The judged tests: every one that recorded a microbatch or carries the marker.
    assert ("fp8audit: 6 tests audited (7 microbatches), 2 failed their FP8 state updates"
            in result.stdout), result.stdout
    # A passing session removes them, and one line says the audit happened.
    for old in kept:
        shutil.rmtree(old)
    result, _ = run_suite(tmp_path, "--fp8audit", "-k", "test_one_one", TMPDIR=str(scratch))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "traces" not in result.stderr, result.stderr
    assert list(scratch.glob("fp8audit-pytest-*")) == [], "the temporary traces are removed"
    assert ("fp8audit: 1 test audited (2 microbatches), every microbatch made its expected FP8 "
            "state updates") in result.stdout, result.stdout
    result, _ = run_suite(tmp_path, "--fp8audit", "--fp8audit-keep", TMPDIR=str(scratch))
    kept = list(scratch.glob("fp8audit-pytest-*"))
    assert len(kept) == 1 and list(kept[0].glob("*.fp8trace")), result.stderr
    assert f"fp8audit: traces in {kept[0]}" in result.stderr


def test_the_ini_file_turns_the_audit_on_as_the_flags_do(tmp_path):
    needs_agent()
    (tmp_path / "pytest.ini").write_text("[pytest]\nfp8audit = true\nfp8audit_out = traces\n")
    result, outcomes = run_suite(tmp_path, "-k", "test_one_one or test_two_forward")
    assert result.returncode == 1, result.stdout + result.stderr
    assert outcomes.get("test_one_one") == "passed", outcomes
    assert "did not make 1 forward / 1 backward" in outcomes["test_two_forward_updates_in_the_second"]
    assert list((tmp_path / "traces").glob("*.fp8trace")), "fp8audit_out names the trace folder"
    (tmp_path / "pytest.ini").write_text("[pytest]\nfp8audit = false\n")
    result, outcomes = run_suite(tmp_path, "-k", "test_one_one or test_two_forward")
    assert result.returncode == 0, result.stdout + result.stderr


def test_in_a_checkout_pytest_fp8audit_examples_works_without_p():
    needs_agent()
    needs_ops()
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                             "--fp8audit", "examples"], cwd=ROOT,
                            env=env(PYTHONDONTWRITEBYTECODE="1"), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout, result.stdout


def test_without_the_flag_the_plugin_judges_nothing(tmp_path):
    result, outcomes = run_suite(tmp_path)
    failed = {name for name, text in outcomes.items() if text != "passed"}
    assert failed == {"test_fails_on_its_own"}, result.stdout + result.stderr


def test_fp8audit_without_the_executable_is_a_usage_error(tmp_path):
    result, outcomes = run_suite(tmp_path, "--fp8audit", FP8AUDIT_BIN="/nonexistent/fp8audit")
    assert result.returncode == 4
    assert "--fp8audit: the fp8audit executable was not found" in result.stderr
    assert outcomes == {}


CHILDREN = textwrap.dedent("""
    import multiprocessing, os, fp8audit

    def microbatch(forward=1, backward=1):
        with fp8audit.microbatch():
            fp8audit.update("forward", forward)
            fp8audit.update("backward", backward)

    def bad():
        microbatch(backward=2)
        return 0

    def good():
        microbatch()
        return 0

    def in_a_forked_child(work):
        pid = os.fork()
        if pid == 0:
            work()
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0

    def in_a_pool_worker(work):
        pool = multiprocessing.get_context("fork").Pool(1)
        assert pool.apply(work) == 0
        pool.close()
        pool.join()

    def in_a_spawned_process(work):
        p = multiprocessing.get_context("spawn").Process(target=work)
        p.start()
        p.join()
        assert p.exitcode == 0

    def test_bad_in_a_forked_child():
        microbatch()
        in_a_forked_child(bad)

    def test_bad_in_a_fork_pool_worker():
        in_a_pool_worker(bad)

    def test_bad_in_a_spawned_process():
        in_a_spawned_process(bad)

    def test_good_in_each_kind_of_child():
        in_a_forked_child(good)
        in_a_pool_worker(good)
        in_a_spawned_process(good)

    def test_after_the_children():
        microbatch()
""")


def test_microbatches_in_the_tests_child_processes_are_the_tests(tmp_path):
    needs_agent()
    (tmp_path / "test_children.py").write_text(CHILDREN)
    junit = tmp_path / "junit.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "fp8audit.pytest_plugin", "-p", "no:cacheprovider",
         f"--junitxml={junit}", "--fp8audit", "--fp8audit-out", str(tmp_path / "t"),
         "test_children.py"],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=600)
    outcomes: Dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        outcomes[case.get("name", "")] = "passed" if failure is None else \
            (failure.get("message", "") + "\n" + (failure.text or ""))
    assert result.returncode == 1, result.stdout + result.stderr
    for name in ("test_bad_in_a_forked_child", "test_bad_in_a_fork_pool_worker",
                 "test_bad_in_a_spawned_process"):
        text = outcomes[name]
        assert "1 of " in text and "forward 1, backward 2" in text, (name, text)
        assert "in the trace of pid " in text, (name, text)
    assert "forked from pid" in outcomes["test_bad_in_a_forked_child"]
    assert outcomes["test_good_in_each_kind_of_child"] == "passed", outcomes
    assert outcomes["test_after_the_children"] == "passed", outcomes
    # `fp8audit check` on the same traces agrees that some microbatch failed.
    check = subprocess.run([str(BIN), "check", str(tmp_path / "t")],
                           capture_output=True, text=True)
    assert check.returncode == 3, check.stdout + check.stderr


def test_rows_folded_past_ten_thousand_microbatches_are_judged_one_by_one():
    from fp8audit.pytest_plugin import _each_microbatch
    rows = [{"index": 0, "forward_updates": 1}, {"index": 1, "through_index": 3, "verdict": "FAIL"},
            {"index": 4}]
    each = _each_microbatch(rows)
    assert [m.get("index", 0) for m in each] == [0, 1, 2, 3, 4]
    assert [m.get("verdict") for m in each] == [None, "FAIL", "FAIL", "FAIL", None]


WITHOUT_AGENT = textwrap.dedent("""
    import os, subprocess, sys, fp8audit

    ALONE = {"PATH": os.environ["PATH"]}  # names no agent: what the child does goes unaudited
    LAUNCHER = (
        "import os, subprocess, sys, fp8audit\\n"
        "with fp8audit.microbatch():\\n"
        "    fp8audit.update('forward', 1)\\n"
        "    fp8audit.update('backward', 1)\\n"
        "subprocess.run([sys.executable, '-c', 'pass'], env={'PATH': os.environ['PATH']},\\n"
        "               check=True)\\n")

    def microbatch():
        with fp8audit.microbatch():
            fp8audit.update("forward", 1)
            fp8audit.update("backward", 1)

    def test_good_before():
        microbatch()

    def test_worker_starts_a_program_without_the_agent():
        microbatch()
        subprocess.run([sys.executable, "-c", LAUNCHER], check=True)

    def test_good_after():
        microbatch()
""")


def test_the_plugins_own_report_runs_are_no_children_without_the_agent(tmp_path):
    needs_agent()
    result, outcomes = run_suite(tmp_path, "--fp8audit", "--fp8audit-out", str(tmp_path / "t"),
                                 "-k", "test_one_one or test_records_nothing")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "without the agent" not in result.stderr, result.stderr
    rep = report(tmp_path / "t")
    assert rep["outcome"] == "OUTCOME_PASS", rep
    assert not any(r.get("children_without_agent") for r in rep["ranks"]), rep


def test_a_test_whose_traces_gain_a_process_without_the_agent_fails_as_incomplete(tmp_path):
    needs_agent()
    result, outcomes = run_tests(tmp_path, WITHOUT_AGENT, "--fp8audit", "--fp8audit-out",
                                 str(tmp_path / "t"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert outcomes["test_good_before"] == "passed", outcomes
    assert outcomes["test_good_after"] == "passed", outcomes
    text = outcomes["test_worker_starts_a_program_without_the_agent"]
    line = text.strip().splitlines()[0]
    assert line.startswith("fp8audit: this test's audit is incomplete, not a pass: process "), text
    assert "without the agent" in line and "(trace of pid " in line, text
    assert set(text.strip().splitlines()) == {line}, text  # its microbatches met the expectation
    assert "1 incomplete" in result.stdout, result.stdout


def test_a_program_the_test_process_starts_without_the_agent_fails_that_test_not_the_next(
        tmp_path):
    # Python's subprocess starts it through vfork: the agent notes it at once, and the test's
    # look (fp8audit_flush) writes that note before reading, so the test that started it fails
    # and its healthy neighbours pass.
    needs_agent()
    source = textwrap.dedent("""
        import os, subprocess, sys
        import fp8audit

        def microbatch():
            with fp8audit.microbatch():
                fp8audit.update("forward", 1)
                fp8audit.update("backward", 1)

        def test_a_starts_a_program_without_the_agent():
            subprocess.run([sys.executable, "-c", "pass"], env={"PATH": os.environ["PATH"]},
                           check=True)

        def test_b_healthy():
            microbatch()

        def test_c_healthy():
            microbatch()
    """)
    result, outcomes = run_tests(tmp_path, source, "--fp8audit", "--fp8audit-out",
                                 str(tmp_path / "t"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert outcomes["test_b_healthy"] == "passed", outcomes
    assert outcomes["test_c_healthy"] == "passed", outcomes
    text = outcomes["test_a_starts_a_program_without_the_agent"]
    assert text.startswith("fp8audit: this test's audit is incomplete, not a pass: process "), text
    assert "without the agent" in text, text


def test_a_terminated_session_dies_by_the_signal_as_pytest_alone_would(tmp_path):
    needs_agent()
    started = tmp_path / "started"
    (tmp_path / "test_x.py").write_text(textwrap.dedent(f"""
        import pathlib, time

        def test_slow():
            pathlib.Path({str(started)!r}).write_text("")
            time.sleep(120)
    """))
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "fp8audit.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "--fp8audit", "--fp8audit-out", str(tmp_path / "t"), "test_x.py"],
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists() and session.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), session.communicate(timeout=60)
    session.send_signal(signal.SIGTERM)
    out, err = session.communicate(timeout=120)
    assert session.returncode == -signal.SIGTERM, (session.returncode, out, err)


def test_incomplete_causes_are_the_ranks_facts_each_new_one_once():
    from fp8audit.pytest_plugin import _incomplete_causes
    rank = {"children_without_agent": ["environment 12 /usr/bin/python3"],
            "hook_unchecked": [{"check": "recompute", "reason": "AttributeError"}],
            "damage": "trace ends without a footer (the process was killed?)"}
    seen: set = set()
    causes = _incomplete_causes(rank, seen)
    assert len(causes) == 2, causes
    assert causes[0].startswith("process 12 started /usr/bin/python3 without the agent"), causes
    assert "recompute check" in causes[1] and "AttributeError" in causes[1], causes
    assert all("\n" not in c for c in causes)
    assert _incomplete_causes(rank, seen) == []  # the trace read again: nothing new
    rank["python_hook_absent"] = True
    assert len(_incomplete_causes(rank, seen)) == 1
