"""The agent leaves a Python job's signal handling as it is without it (issue 34 item 2): under
`fp8audit run` (the agent preloaded) Python installs its own SIGINT handler, Ctrl-C raises
KeyboardInterrupt, handlers save and restore, a signal interrupts a blocked read as it should,
multiprocessing's forkserver and spawn pools and a torch DataLoader's workers run; a signal whose
default action ends the job still leaves a finished trace."""

from __future__ import annotations

import signal
import textwrap

import pytest

from pkgutil_fp8audit import audit, needs_agent, report

MARK = ("import fp8audit\nwith fp8audit.microbatch():\n    fp8audit.update('forward')\n"
        "    fp8audit.update('backward')\n")


def _job(tmp_path, body: str, name: str = "job.py"):
    path = tmp_path / name
    path.write_text(MARK + textwrap.dedent(body))
    return path


def _run(tmp_path, body: str, timeout: int = 120):
    needs_agent()
    return audit(tmp_path / "t", [str(_job(tmp_path, body))], timeout=timeout)


def test_python_installs_its_own_sigint_handler_and_reads_the_defaults_back(tmp_path):
    r = _run(tmp_path, """
        import signal
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
              signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
              signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True True True"


def test_sigint_raises_keyboard_interrupt_that_the_job_can_catch(tmp_path):
    r = _run(tmp_path, """
        import os, signal, sys, time
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            print("caught")
            sys.exit(0)
        sys.exit(4)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "caught"


def test_a_handler_saved_and_restored_comes_back_as_it_was(tmp_path):
    r = _run(tmp_path, """
        import signal
        seen = []
        old = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
        signal.raise_signal(signal.SIGTERM)
        back = signal.signal(signal.SIGTERM, old)
        print(old == signal.SIG_DFL, callable(back), seen == [signal.SIGTERM],
              signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
        old = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.raise_signal(signal.SIGUSR1)  # ignored
        signal.signal(signal.SIGUSR1, old)
        print(signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"] * 5


def test_a_signal_interrupts_a_blocked_read_and_runs_the_python_handler(tmp_path):
    r = _run(tmp_path, """
        import os, signal
        class Alarm(Exception):
            pass
        def on_alarm(s, f):
            raise Alarm()
        signal.signal(signal.SIGALRM, on_alarm)
        read_end, _ = os.pipe()
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            os.read(read_end, 1)  # nothing ever comes
        except Alarm:
            print("interrupted")
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "interrupted"


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_multiprocessing_pools_run(tmp_path, method):
    _job(tmp_path, "def square(x):\n    return x * x\n", "work.py")
    r = _run(tmp_path, f"""
        import multiprocessing as mp, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import work
        if __name__ == "__main__":
            with mp.get_context({method!r}).Pool(2) as pool:
                print(sum(pool.map(work.square, range(10))))
    """, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "285"
    assert "Traceback" not in r.stderr, r.stderr


def test_a_dataloader_with_workers_runs(tmp_path):
    r = _run(tmp_path, """
        import torch
        data = torch.utils.data.TensorDataset(torch.arange(16.0))
        if __name__ == "__main__":
            loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=2)
            print(int(sum(float(b[0].sum()) for b in loader)))
    """, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "120"


def test_a_default_sigterm_still_ends_the_job_by_the_signal_with_a_finished_trace(tmp_path):
    r = _run(tmp_path, """
        import os, signal
        os.kill(os.getpid(), signal.SIGTERM)
    """)
    assert r.returncode == 4, (r.returncode, r.stderr)  # the command failed (run's code)
    assert "the command was killed by signal 15" in r.stderr, r.stderr
    ranks = report(tmp_path / "t")["ranks"]
    assert len(ranks) == 1
    assert not ranks[0].get("damage"), ranks[0].get("damage")
    assert [int(m.get("forward_updates", 0)) for m in ranks[0]["microbatches"]] == [1]


def test_without_the_preload_the_agent_leaves_the_dispositions_alone(tmp_path):
    """The NVTX injection route alone loads the agent where it cannot answer sigaction for the
    job: it installs no handler at all."""
    needs_agent()
    from pkgutil_fp8audit import AGENT, python

    r = python(MARK + "import signal\nprint(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, "
               "signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n",
               NVTX_INJECTION64_PATH=str(AGENT), FP8AUDIT_OUT=str(tmp_path / "t"))
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "t").glob("*.fp8trace")), "the agent was not loaded"
    assert r.stdout.strip() == "True True"
