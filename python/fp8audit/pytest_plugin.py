"""`pytest --fp8audit`: runs the session under fp8audit's agent and fails each test whose logical
microbatches do not make one forward and one backward FP8 state update, or what its marker
declares: `@pytest.mark.fp8audit(forward=F, backward=B)`. Registered as the pytest11 entry point
`fp8audit.pytest_plugin` by a pip install; in a checkout, by a conftest's `pytest_plugins` (as
examples/conftest.py does) or `-p fp8audit.pytest_plugin`.

Not under the agent yet, the session is run again as `fp8audit run -qq --out DIR -- python -m
pytest ARGS...` (before any output is captured); this process then exits with that session's
status, and a temporary DIR is removed when the session passes unless --fp8audit-keep (a failing
session keeps it: its failures name the traces in it).
In the session under the agent, right after each test's call phase the agent writes what it has
recorded (fp8audit_flush(): synchronous, no waiting on time) and `fp8audit report --format json`
on this process's trace gives the microbatches recorded since the test's setup ended: those are
the test's. One that differs from the expectation (or that the report judges failing) fails the
test with the report's counts, explanations and violations; a trace that gains a reason its audit
is incomplete (a program started without the agent, a Python process without fp8audit run's hook,
a check the hook could not run) fails it with one line. The plugin's own `fp8audit report` runs
with FP8AUDIT_DISABLE=1, which the agent does not count as a program without it. The traces of
the processes a test starts count too (os.fork children, multiprocessing's fork and spawn
workers, subprocesses): each trace of this run (FP8AUDIT_RUN_ID) that is new or has grown since
the last look adds its new microbatches to the current test; a child's trace reaches the disk
when the child ends (or at the agent's periodic write), so a test should join its children. A
test without microbatches passes, unless it carries the marker. Microbatches are best marked
(fp8audit.microbatch()): unmarked ones are inferred from pass boundaries and may straddle tests.
The re-running process ends as pytest alone would: with its status, or by the signal that killed
it. A session whose tests passed while its traces, as `fp8audit run` audits them at the end, hold
such a reason exits 1 with one line (a reason that reached a trace after the last test's look).
A program this process itself starts without the agent is in its trace at the test's look: the
agent's flush writes it first."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Dict, Generator, List, Optional, Set, Tuple

import pytest

from fp8audit import _agent, _paths

STATUS_ENV = "FP8AUDIT_PYTEST_STATUS"  # set for the session `fp8audit run` starts
MARKER = "fp8audit"
_AGENT_ENV = ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")
_COUNTED = ("FORWARD_COUNT", "BACKWARD_COUNT", "TRACE_DAMAGED")


def _tool_env() -> Dict[str, str]:
    """The environment of the plugin's own `fp8audit report`: the agent off on purpose. Without
    the agent's variables the executable records nothing; FP8AUDIT_DISABLE=1 tells the agent of
    this process that this is deliberate, so the exec is not counted as a child run without the
    agent (agent/src/shim_children.h), which would leave the session's trace incomplete."""
    env = {k: v for k, v in os.environ.items() if k not in _AGENT_ENV}
    env["FP8AUDIT_DISABLE"] = "1"
    return env


def _incomplete_causes(rank: Dict[str, Any], seen: Set[str]) -> List[str]:
    """Why a trace's audit is incomplete, one line each, from the facts recorded in it (the
    report's rank: programs its processes started without the agent, a Python process without
    fp8audit run's hook, checks the hook could not run); those not in `seen`, which gains them.
    A trace without its footer is not one of them: a running process's trace has none yet."""
    causes: List[Tuple[str, str]] = []
    for child in rank.get("children_without_agent", []):
        why, _, rest = str(child).partition(" ")
        pid, _, program = rest.partition(" ")
        how = {"environment": "its environment names no agent: env -i, or subprocess with "
                              "env={...}; give it env={**os.environ, ...}",
               "privileged": "a set-user-ID or set-group-ID program: the loader ignores "
                             "LD_PRELOAD"}.get(why, why)
        causes.append((f"child {child}", f"process {pid} started {program} without the agent "
                                         f"({how}): what it did was not audited"))
    if rank.get("python_hook_absent"):
        causes.append(("python hook absent", "a Python process used Transformer Engine without "
                       "fp8audit run's Python hook (python -I or -E, or a PYTHONPATH of its "
                       "own): the checks that need it did not run"))
    for unchecked in rank.get("hook_unchecked", []):  # HOOK_UNCHECKED (report.proto)
        check, reason = unchecked.get("check", "?"), unchecked.get("reason", "?")
        causes.append((f"unchecked {check} {reason}", f"fp8audit's Python hook could not run its "
                       f"{check} check ({reason}): a mismatch after that may have gone unseen"))
    new = [" ".join(text.split()) for key, text in causes if key not in seen]
    seen.update(key for key, _ in causes)
    return new


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds --fp8audit, --fp8audit-out DIR and --fp8audit-keep."""
    group = parser.getgroup("fp8audit")
    group.addoption("--fp8audit", action="store_true", default=False,
                    help="run the tests under fp8audit's agent (re-running the session under "
                         "`fp8audit run` when needed) and fail each test whose microbatches do "
                         "not make 1 forward / 1 backward FP8 state update (or what its "
                         "fp8audit marker declares)")
    group.addoption("--fp8audit-out", metavar="DIR", default=None,
                    help="directory for the traces, kept (default: a temporary directory, "
                         "removed at the end of the session unless --fp8audit-keep)")
    group.addoption("--fp8audit-keep", action="store_true", default=False,
                    help="keep the temporary trace directory and name it at the end")
    # The same in pytest.ini / pyproject.toml ([tool.pytest.ini_options]) / setup.cfg, for a
    # project that audits every session; the command line wins.
    parser.addini("fp8audit", type="bool", default=False,
                  help="as --fp8audit: audit every session of this project")
    parser.addini("fp8audit_out", default="", help="as --fp8audit-out DIR")
    parser.addini("fp8audit_keep", type="bool", default=False, help="as --fp8audit-keep")


def _settings(config: pytest.Config, options: Any) -> Tuple[bool, Optional[str], bool]:
    """(on, out, keep): the command line's --fp8audit, --fp8audit-out and --fp8audit-keep, else the
    ini file's fp8audit, fp8audit_out and fp8audit_keep. `options`: the parsed options (the
    early namespace before the conftests load)."""
    def ini(name: str) -> Any:
        try:
            return config.getini(name)
        except ValueError:  # not registered (the plugin loaded late)
            return None
    on = bool(getattr(options, "fp8audit", False) or ini("fp8audit"))
    out = getattr(options, "fp8audit_out", None) or ini("fp8audit_out") or None
    keep = bool(getattr(options, "fp8audit_keep", False) or ini("fp8audit_keep"))
    return on, out, keep


def pytest_configure(config: pytest.Config) -> None:
    """Declares the fp8audit marker; under --fp8audit, re-runs the session under the agent when it
    is not loaded yet, and registers the judge that fails tests whose microbatches do not make
    the expected updates."""
    config.addinivalue_line(
        "markers", f"{MARKER}(forward=1, backward=1): FP8 state updates each microbatch of this "
                   "test must make under --fp8audit; the test must record a microbatch")
    on, out, keep = _settings(config, config.option)
    if on:
        if not _agent.loaded():
            # Loaded by a conftest (a checkout's examples/), after the initial-conftest hook
            # that re-runs the session: re-run from here.
            try:
                _rerun_under_agent(config, out, keep)
            except SystemExit as done:  # pytest's main loop would take it for an error here
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(int(done.code or 0))
        config.pluginmanager.register(_Judge(config), "fp8audit-judge")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: List[str]) -> Generator[None, None, None]:
    """Under --fp8audit without the agent loaded, re-runs the whole session under `fp8audit run`
    before the conftests load."""
    on, out, keep = _settings(early_config, early_config.known_args_namespace)
    if on and not _agent.loaded():
        _rerun_under_agent(early_config, out, keep)
    yield


def _each_microbatch(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """A report's rows, one per microbatch: past 10,000 microbatches a trace's identical
    consecutive rows are one row reaching to `through_index`."""
    out: List[Dict[str, Any]] = []
    for m in rows:
        first = int(m.get("index", 0))
        for i in range(first, int(m.get("through_index", first)) + 1):
            out.append(m if i == first else dict(m, index=i))
    return out


def _rerun_under_agent(config: pytest.Config, out: Optional[str], keep: bool) -> None:
    if os.environ.get(STATUS_ENV):
        raise pytest.UsageError("--fp8audit: the session that `fp8audit run` started has no "
                                "agent (FP8AUDIT_DISABLE=1? its line on stderr says why)")
    binary = _paths.binary()
    if binary is None:
        raise pytest.UsageError("--fp8audit: the fp8audit executable was not found (looked at "
                                f"{_paths.looked_at('bin', 'fp8audit', 'FP8AUDIT_BIN')})")
    temporary = out is None
    out = out or tempfile.mkdtemp(prefix="fp8audit-pytest-")
    fd, status_file = tempfile.mkstemp(prefix="fp8audit-pytest-status-")
    os.close(fd)
    fd, report_file = tempfile.mkstemp(prefix="fp8audit-pytest-report-", suffix=".json")
    os.close(fd)
    # -qq: the tests' failures are in pytest's own report; run says nothing after the session
    # but problems (a trace it cannot read, a command that could not start). --pass-exit-code:
    # pytest's own status, as without the plugin. --json: the session's audit, read here for
    # what no test's look could see (_session_incomplete) and how the session ended.
    command = [str(binary), "run", "-qq", "--pass-exit-code", "--out", out, "--json",
               report_file, "--", sys.executable, "-m", "pytest", *config.invocation_params.args]
    env = dict(os.environ, **{STATUS_ENV: status_file})
    child = subprocess.Popen(command, env=env, cwd=str(config.invocation_params.dir))
    # Ctrl-C reaches the child from the terminal; a SIGTERM sent to this process is passed on.
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda sig, frame: child.send_signal(sig))
    try:
        run_code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    session: Optional[int] = None
    try:
        with open(status_file) as f:
            session = int(f.read().strip())  # pytest's own status, not run's verdict
    except (OSError, ValueError):
        pass  # the session ended before pytest did (killed): run's status stands
    finally:
        os.unlink(status_file)
    report = _read_report(report_file)
    killed_by = _death_signal(run_code, session, report)
    code = session if session is not None else (128 + killed_by if killed_by else run_code)
    if code == 0:
        incomplete = _session_incomplete(report)
        if incomplete:  # no test failed for it: the session fails, not passes
            print(incomplete, file=sys.stderr, flush=True)
            code = 1
    if temporary and not keep and code == 0:
        shutil.rmtree(out, ignore_errors=True)
    elif temporary and not keep:  # the failures name traces in it: kept, and said so
        print(f"fp8audit: traces kept in {out} (the session failed; removed when it passes "
              "unless --fp8audit-keep)", file=sys.stderr, flush=True)
    else:
        print(f"fp8audit: traces in {out}", file=sys.stderr, flush=True)
    if killed_by:
        _die_by(killed_by)
    raise SystemExit(code)


def _read_report(path: str) -> Optional[Dict[str, Any]]:
    """`fp8audit run --json`'s report, None where run wrote none (no trace: nothing recorded)."""
    try:
        with open(path) as f:
            text = f.read()
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _death_signal(run_code: int, session: Optional[int],
                  report: Optional[Dict[str, Any]]) -> Optional[int]:
    """The signal that killed the session (pytest under `fp8audit run`, or run itself), else
    None: pytest that finished its session wrote its status."""
    if run_code < 0:
        return -run_code
    if session is not None:
        return None
    end = (report or {}).get("command_end") or {}
    if end.get("signal"):
        return int(end["signal"])
    # No trace, no report: --pass-exit-code returns 128+S for a command killed by signal S, and
    # pytest, which never reached its session's end, did not choose that code.
    if 128 < run_code < 128 + signal.NSIG:
        return run_code - 128
    return None


def _die_by(sig: int) -> None:
    """Ends this process by `sig`, as pytest without the plugin would have ended: its parent
    sees death by that signal, not an exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass  # not a signal that ends a process here: the exit status stands


def _session_incomplete(report: Optional[Dict[str, Any]]) -> Optional[str]:
    """One line when the session's traces, as `fp8audit run` audited them at its end, hold a
    reason the audit is incomplete that no test's look saw (a program this process started
    without the agent is recorded by the agent's writer later, or at exit; a trace without its
    footer: a process killed), else None."""
    causes: List[str] = []
    for rank in (report or {}).get("ranks", []):
        path = rank.get("path", "")
        if rank.get("damage"):
            causes.append(f"{' '.join(str(rank['damage']).split())} ({path})")
        causes.extend(f"{c} ({path})" for c in _incomplete_causes(rank, set()))
    if not causes:
        return None
    more = f" (and {len(causes) - 1} more)" if len(causes) > 1 else ""
    return f"fp8audit: the session's audit is incomplete, not a pass: {causes[0]}{more}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class _Judge:
    """Attributes microbatches to tests and judges them (the session under the agent).

    Every trace this run's processes write counts: this process's and its children's (os.fork,
    multiprocessing's fork and spawn workers, subprocesses), each found in the trace directory
    when it is new or has grown since the last look, its microbatches beyond those already
    attributed being the current test's."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._binary = _paths.binary()
        self._out = os.environ.get("FP8AUDIT_OUT")
        self._run_id = os.environ.get("FP8AUDIT_RUN_ID", "")
        self._seen: Dict[str, int] = {}  # trace -> microbatches attributed so far
        self._causes: Dict[str, Set[str]] = {}  # trace -> incomplete causes already attributed
        self._pending: List[str] = []  # causes found since the last test was judged
        self._incomplete = 0  # tests failed for an incomplete audit
        self._stamps = self._trace_stamps()  # trace -> (size, mtime) when last read
        self._judged = 0  # tests whose microbatches were judged
        self._microbatches = 0
        self._failed = 0

    def _trace_stamps(self) -> Dict[str, Tuple[int, int]]:
        stamps: Dict[str, Tuple[int, int]] = {}
        if not self._out or not os.path.isdir(self._out):
            return stamps
        for entry in os.scandir(self._out):
            if entry.name.endswith(".fp8trace") and entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                stamps[entry.path] = (st.st_size, st.st_mtime_ns)
        return stamps

    def _report(self, paths: List[str], forward: int, backward: int) -> Dict[str, Any]:
        if self._binary is None:
            raise _agent.AgentError("the fp8audit executable was not found (looked at "
                                    f"{_paths.looked_at('bin', 'fp8audit', 'FP8AUDIT_BIN')})")
        result = subprocess.run(
            [str(self._binary), "report", *paths, "--format", "json", "--no-progress",
             "--run", "all",  # the paths are the ones to judge, whatever run wrote them
             "--expect-forward", str(forward), "--expect-backward", str(backward)],
            env=_tool_env(), capture_output=True, text=True, check=False)
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise _agent.AgentError(f"`fp8audit report {' '.join(paths)}` printed no report (exit "
                                    f"{result.returncode}): {result.stderr.strip()}") from None

    def _new_microbatches(self, forward: int, backward: int) -> Tuple[List[_Microbatch],
                                                                       Optional[str]]:
        """The microbatches recorded since the last look, in this process's trace and in those of
        its children, and this process's trace's path; the traces' new incomplete causes join
        self._pending."""
        own = _agent.flush()
        stamps = self._trace_stamps()
        if own is not None and own not in stamps:  # written elsewhere (FP8AUDIT_OUT changed)
            st = os.stat(own)
            stamps[own] = (st.st_size, st.st_mtime_ns)
        changed = sorted(p for p, stamp in stamps.items() if self._stamps.get(p) != stamp)
        self._stamps.update(stamps)
        if not changed:
            return [], own
        report = self._report(changed, forward, backward)
        new: List[_Microbatch] = []
        for rank in report.get("ranks", []):
            path = rank.get("path", "")
            header = rank.get("header", {})
            if header.get("run_id", "") not in ("", self._run_id):
                continue  # another run's trace in the same directory
            rows = _each_microbatch(rank.get("microbatches", []))
            first, self._seen[path] = self._seen.get(path, 0), len(rows)
            indexes = {m.get("index", 0) for m in rows[first:]}
            # Counts are judged from the microbatches themselves; a trace read while its process
            # runs has no footer yet (TRACE_DAMAGED): neither is repeated as a violation.
            kept = [v for v in rank.get("violations", []) if v.get("microbatch", 0) in indexes
                    and v.get("kind") not in _COUNTED]
            whose = "" if path == own else _whose(header, path)
            where = f"trace of {whose}" if whose else f"this process's trace {path}"
            self._pending.extend(f"{cause} ({where})" for cause in
                                 _incomplete_causes(rank, self._causes.setdefault(path, set())))
            new.extend(_Microbatch(m, [v for v in kept if v.get("microbatch", 0) ==
                                       m.get("index", 0)], whose) for m in rows[first:])
        return new, own

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        marker = item.get_closest_marker(MARKER)
        forward = int(marker.kwargs.get("forward", 1)) if marker else 1
        backward = int(marker.kwargs.get("backward", 1)) if marker else 1
        try:
            microbatches, path = self._new_microbatches(forward, backward)
        except (_agent.AgentError, OSError) as e:
            if call.when == "call" and report.passed:
                report.outcome = "failed"
                report.longrepr = f"fp8audit: cannot judge this test: {e}"
            return
        if call.when == "setup":
            return  # setup microbatches are no test's; its incomplete causes are the test's
        incomplete, self._pending = _incomplete_line(self._pending), []
        if not report.passed:
            return  # a failed test stays failed (`fp8audit run` names the causes at the end)
        if call.when == "teardown":  # a fixture's: the test's teardown fails
            if incomplete:
                self._incomplete += 1
                report.outcome = "failed"
                report.longrepr = incomplete
            return  # teardown microbatches are no test's
        failure = _judge(microbatches, forward, backward, marker is not None, path)
        if microbatches or marker is not None or incomplete:
            self._judged += 1
            self._microbatches += len(microbatches)
        if incomplete:
            self._incomplete += 1
        if failure:
            self._failed += 1
        if incomplete or failure:
            report.outcome = "failed"
            report.longrepr = "\n".join(t for t in (incomplete, failure) if t)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line saying what the audit judged: an audit that passed is visible too."""
        judged = (f"fp8audit: {self._judged} test{'s' * (self._judged != 1)} audited "
                  f"({self._microbatches} microbatch{'es' * (self._microbatches != 1)})")
        incomplete = f", {self._incomplete} incomplete" if self._incomplete else ""
        if self._failed:
            line = f"{judged}, {self._failed} failed their FP8 state updates{incomplete}"
        elif self._incomplete:
            line = f"{judged}{incomplete}"
        elif self._judged:
            line = f"{judged}, every microbatch made its expected FP8 state updates"
        else:
            line = "fp8audit: no test recorded a microbatch: nothing was audited"
        terminalreporter.write_line(line)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        status_file = os.environ.get(STATUS_ENV)
        if status_file:
            with open(status_file, "w") as f:
                f.write(str(int(exitstatus)))


class _Microbatch:
    """One microbatch of the report, its violations, and whose trace it is in ("" this
    process's, else e.g. "pid 12, forked from pid 10")."""

    def __init__(self, row: Dict[str, Any], violations: List[Dict[str, Any]], whose: str) -> None:
        self.row, self.violations, self.whose = row, violations, whose


def _incomplete_line(causes: List[str]) -> Optional[str]:
    """The one line failing a test whose traces gained incomplete causes, else None."""
    if not causes:
        return None
    more = f" (and {len(causes) - 1} more)" if len(causes) > 1 else ""
    return f"fp8audit: this test's audit is incomplete, not a pass: {causes[0]}{more}"


def _whose(header: Dict[str, Any], path: str) -> str:
    pid = header.get("pid", "?")
    parent = header.get("parent_pid")
    return f"pid {pid}" + (f", forked from pid {parent}" if parent else "") + f": {path}"


def _judge(microbatches: List[_Microbatch], forward: int, backward: int, required: bool,
           path: Optional[str]) -> Optional[str]:
    """The failure text for a test's microbatches, or None when they meet the expectation."""
    if not microbatches:
        if not required:
            return None
        return ("fp8audit: this test recorded no microbatch (mark them with "
                "`with fp8audit.microbatch():`); its fp8audit marker expects "
                f"{forward} forward / {backward} backward FP8 state updates in each")
    lines: List[str] = []
    failing = 0
    for n, mb in enumerate(microbatches, 1):
        m = mb.row
        got = (m.get("forward_updates", 0), m.get("backward_updates", 0))
        if got == (forward, backward) and m.get("verdict") != "FAIL":
            continue
        failing += 1
        where = f" in the trace of {mb.whose}" if mb.whose else ""
        lines.append(f"  microbatch {m.get('index', 0)} (the test's {_ordinal(n)}){where}: "
                     f"forward {got[0]}, backward {got[1]}")
        lines.extend(f"    - {e}" for e in m.get("explanations", []))
        lines.extend(f"    - {v.get('message', '')}" for v in mb.violations)
        if got == (0, 0):
            lines.append("    - no FP8 state update was recorded in it (on the CPU only announced "
                         "ones count: fp8audit.ops.delayed_scaling_update, fp8audit.update())")
    if not failing:
        return None
    return "\n".join([f"fp8audit: {failing} of {len(microbatches)} microbatches of this test did "
                      f"not make {forward} forward / {backward} backward FP8 state updates:",
                      *lines, f"  trace: {path} (fp8audit report {path})"])
