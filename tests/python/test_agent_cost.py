"""tests/live_te/agent_cost.py on fake processes (no GPU, no Megatron): the arms alternate so that
each runs first in half the pairs, the warm-up step is left out, the ratio is agent over plain,
and a process without step times stops the measurement with exit 1."""

from __future__ import annotations

import json
import subprocess

import pytest

import agent_cost


def _done(seconds, code=0):
    line = json.dumps({"kind": "run", "seconds": seconds})
    return subprocess.CompletedProcess([], code, stdout=f"noise\n{line}\n", stderr="")


def test_arms_alternate_so_each_runs_first_in_half_the_pairs():
    assert agent_cost.order(3) == ["plain", "agent", "agent", "plain", "plain", "agent"]


def test_the_warm_up_step_is_left_out_and_the_ratio_is_agent_over_plain():
    commands = []

    def run(command):
        commands.append(command)
        agent = command[1] == "run"
        return _done([9.0, 1.1, 1.1] if agent else [9.0, 1.0, 1.0], code=3 if agent else 0)

    out = agent_cost.measure("/bin/fp8audit", 2, ["--row", "full-uniform"], run)
    assert out["plain"]["steps_s"] == [1.0] * 4 and out["agent"]["steps_s"] == [1.1] * 4
    assert out["ratio_agent_over_plain"] == pytest.approx(1.1)
    assert [c[0] == "/bin/fp8audit" for c in commands] == [False, True, True, False]
    assert commands[1][-2:] == ["--row", "full-uniform"] and "--no-twin" in commands[1]


def test_a_process_without_step_times_stops_the_measurement(capsys):
    def run(command):
        return subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback\nOOM")

    with pytest.raises(SystemExit) as e:
        agent_cost.measure("/bin/fp8audit", 1, [], run)
    assert e.value.code == 1 and "OOM" in capsys.readouterr().err
