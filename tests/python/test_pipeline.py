"""Pipeline schedules on one process under the agent: `fp8audit.microbatch(id=i)` on both marker
routes, and fp8audit.megatron's markers around a schedule module with Megatron-core's
forward_step / backward_step, count each logical microbatch's updates in it however a 1F1B
schedule orders its passes; ranges without ids say the microbatches cannot be told apart."""

import json
import textwrap

import pytest

from pkgutil_fp8audit import audit, needs_agent, python, report

# A 1F1B schedule on one process (WARMUP forwards in flight), each pass announcing its updates
# (fp8audit.update: what a CPU-side update looks like to the agent). MODE: ids (explicit markers
# with ids), plain (markers without ids) or megatron (fp8audit.megatron around a module with
# Megatron-core's function names). argv: MODE N WARMUP [EXTRA_FORWARD_MB].
SCHEDULE = textwrap.dedent("""
    import sys, types, fp8audit, fp8audit.megatron
    mode, n, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    extra = int(sys.argv[4]) if len(sys.argv) > 4 else -1

    class Output:  # what forward_step returns first: the output tensor (weak-referenceable)
        def __init__(self, mb):
            self.mb = mb

    def forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
                     forward_data_store, config):
        mb = next(data_iterator)
        fp8audit.update("forward", 2 if mb == extra else 1)
        return Output(mb), 1

    def backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
        fp8audit.update("backward")

    schedules = types.ModuleType("schedules")
    schedules.forward_step, schedules.backward_step = forward_step, backward_step

    def marked(mb, fn):
        if mode == "megatron":
            return fn()
        with fp8audit.microbatch(id=mb) if mode == "ids" else fp8audit.microbatch():
            return fn()

    def one_f_one_b():
        data = iter(range(n))
        outputs = []
        def fwd(i):
            out, _ = marked(i, lambda: schedules.forward_step(None, data, None, n, None, [], None))
            outputs.append(out)
        def bwd(i):
            marked(i, lambda: schedules.backward_step(None, outputs.pop(0), None, None, None))
        for i in range(warmup):
            fwd(i)
        for i in range(n - warmup):
            bwd(i)
            fwd(i + warmup)
        for i in range(n - warmup, n):
            bwd(i)

    if mode == "megatron":
        assert fp8audit.megatron.mark_microbatches(schedules)
        assert fp8audit.megatron.mark_microbatches(schedules)  # idempotent
    for step in range(2):
        one_f_one_b()
        fp8audit.step()
""")


def run_schedule(tmp_path, *args, torch=False):
    needs_agent()
    job = tmp_path / "job.py"
    job.write_text(("import torch\n" if torch else "") + SCHEDULE)
    r = audit(tmp_path / "t", [str(job), *map(str, args)])
    rep = report(tmp_path / "t")
    assert len(rep["ranks"]) == 1, rep
    return r, rep["ranks"][0]


def rows(rank):
    return [(int(m["microbatch_id"]) if "microbatch_id" in m else None,
             m.get("forward_updates", 0), m.get("backward_updates", 0))
            for m in rank.get("microbatches", [])]


@pytest.mark.parametrize("torch", [False, True])
def test_ranges_with_ids_count_each_microbatch_of_a_1f1b_schedule_once_each_way(tmp_path, torch):
    """The markers library route, with no torch and with a CPU torch (no CUDA: torch's NVTX is
    not the route)."""
    r, rank = run_schedule(tmp_path, "ids", 6, 3, torch=torch)
    assert r.returncode == 0, r.stderr
    assert rows(rank) == [(i, 1, 1) for i in range(6)] * 2


def test_megatron_markers_pair_each_backward_step_with_its_forward_step(tmp_path):
    r, rank = run_schedule(tmp_path, "megatron", 6, 3)
    assert r.returncode == 0, r.stderr
    assert rows(rank) == [(i, 1, 1) for i in range(12)]  # ids are new for every forward_step


def test_an_extra_update_in_an_interleaved_microbatch_fails_that_microbatch(tmp_path):
    r, rank = run_schedule(tmp_path, "megatron", 6, 3, 4)
    assert r.returncode == 3, r.stderr
    bad = [row for row in rows(rank) if row[1:] != (1, 1)]
    assert bad == [(4, 2, 1), (10, 2, 1)]
    messages = [v["message"] for v in rank["violations"]]
    assert messages == ["microbatch 4 (id 4, step 0): 2 forward updates, expected 1",
                        "microbatch 10 (id 10, step 1): 2 forward updates, expected 1"], messages


def test_ranges_without_ids_around_a_1f1b_schedule_say_microbatches_cannot_be_told_apart(
        tmp_path):
    r, rank = run_schedule(tmp_path, "plain", 6, 3)
    assert r.returncode == 3, r.stderr  # every range judged alone: forward-only, backward-only
    notes = " ".join(rank["recording"].get("notes", []))
    assert "microbatches cannot be told apart" in notes, notes
    assert "fp8audit.megatron.mark_microbatches()" in notes, notes
    assert "cannot be told apart" in r.stderr, r.stderr


def test_torch_route_names_the_microbatch_in_the_range():
    """Where torch has CUDA, the range goes through torch.cuda.nvtx with the id in its text."""
    code = textwrap.dedent("""
        import json, torch, fp8audit
        pushed = []
        torch.cuda.is_available = lambda: True
        torch.cuda.nvtx.range_push = pushed.append
        torch.cuda.nvtx.range_pop = lambda: pushed.append("pop")
        with fp8audit.microbatch(id=7):
            pass
        with fp8audit.microbatch():
            pass
        print(json.dumps(pushed))
    """)
    r = python(code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["fp8audit.microbatch id=7", "pop", "fp8audit.microbatch",
                                    "pop"]


def test_a_microbatch_id_that_is_not_a_non_negative_int_is_refused():
    r = python(textwrap.dedent("""
        import fp8audit
        for bad in (-1, 2**64, 1.5, "3", True):
            try:
                fp8audit.microbatch(id=bad)
            except ValueError as e:
                print("refused")
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["refused"] * 5


def test_mark_microbatches_without_megatron_changes_nothing():
    r = python(textwrap.dedent("""
        import sys, types, fp8audit.megatron
        sys.modules["megatron"] = None  # as where megatron-core is not installed
        print(fp8audit.megatron.mark_microbatches())
        print(fp8audit.megatron.mark_microbatches(types.ModuleType("no_steps")))
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
