#!/usr/bin/env python3
"""probes_compare.py on synthetic results (no GPU, no TE): agreeing runs print every row "yes" and
exit 0; a probe that misses an update, a te-call or CUPTI update under the unfused path, CUPTI in
an auto run's header, changed profiler events or a subscriber error each make their row "NO" and
exit 1; missing input exits 2. The model comes from a stand-in fp8audit (model answers below)."""
import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPARE = HERE / "probes_compare.py"
# layout -> (forward, backward) per microbatch, as TE 2.20 does it (after / inside)
TRUTH = {"none": {"after": (1, 1), "inside": (1, 1)},
         "reentrant-per-layer": {"after": (4, 3), "inside": (1, 3)}}

FAKE_FP8AUDIT = textwrap.dedent("""\
    #!{python}
    import json, sys
    truth = {truth!r}
    args = sys.argv[1:]
    backward = args[args.index("--backward") + 1] if "--backward" in args else "after"
    if "--layers" in args:
        layout = {{"1": "none"}}.get(args[args.index("--checkpoint") + 1] == "none" and "1",
                                     "reentrant-per-layer")
    else:
        layout = args[1].rsplit("/", 1)[-1].replace(".textproto", "")
    f, b = truth[layout][backward]
    print(json.dumps({{"microbatches": [{{"forward_updates": f, "backward_updates": b}}] * 2}}))
""")


def event(kind, source, count=1, pass_="FORWARD"):
    return {"kind": kind, "source": source, "pass": pass_, "count": count, "thread": 1,
            "tensors": 0, "te_version": "", "probes": [], "detail": ""}


def write_run(d, name, backward, *, unfused=False, cupti_miss=0, te_call_unfused=0,
              probes=("te-call", "kernel", "python-hook"), microbatches=2):
    te_lines, events, report = [], [{"header": {"probes": list(probes), "pid": 1}}], []
    for layout, truth in TRUTH.items():
        f, b = truth[backward]
        for mb in range(microbatches):
            te_lines.append({"layout": layout, "microbatch": mb, "forward": f, "backward": b})
            report.append({"forward_updates": f, "backward_updates": b})
            events.append(event("MICROBATCH_BEGIN", "NVTX"))
            for n, kind, pass_ in ((f, "FORWARD", "FORWARD"), (b, "BACKWARD", "BACKWARD")):
                if unfused:
                    events.append(event(f"UPDATE_{kind}", "PYTHON_HOOK", n, pass_))
                    if te_call_unfused:
                        events.append(event(f"UPDATE_{kind}", "TE_CALL", te_call_unfused, pass_))
                    continue
                for _ in range(n):
                    events.append(event(f"UPDATE_{kind}", "TE_CALL", 1, pass_))
                    events.append(event(f"CROSSCHECK_UPDATE_{kind}", "KERNEL", 1, pass_))
                events.append(event(f"CROSSCHECK_UPDATE_{kind}", "PYTHON_HOOK", n, pass_))
            if cupti_miss and layout == "reentrant-per-layer":
                last = max(i for i, e in enumerate(events) if e.get("source") == "KERNEL")
                del events[last]
            events.append(event("MICROBATCH_END", "NVTX"))
    (d / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in te_lines))
    (d / f"{name}.events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in events))
    (d / f"{name}.report.json").write_text(json.dumps({"ranks": [{"microbatches": report}]}))


def write_profile(d, plain_events=64, agent_events=64, err=""):
    lines = [{"layout": "reentrant-per-layer", "microbatch": mb, "forward": 4, "backward": 3}
             for mb in range(4)]
    for name, n in (("profile_plain", plain_events), ("profile", agent_events)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) +
                                         json.dumps({"cuda_events": n, "cpu_events": 9}) + "\n")
    (d / "profile.report.json").write_text(json.dumps(
        {"ranks": [{"microbatches": [{"forward_updates": 4, "backward_updates": 3}] * 4}]}))
    (d / "profile.err").write_text(err)


class ProbesCompare(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = Path(self.tmp.name)
        fake = self.d / "fp8audit"
        fake.write_text(FAKE_FP8AUDIT.format(python=sys.executable, truth=TRUTH))
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        self.fake = fake

    def tearDown(self):
        self.tmp.cleanup()

    def results(self, **changes):
        write_run(self.d, "all_after", "after", cupti_miss=changes.get("cupti_miss", 0))
        write_run(self.d, "all_inside", "inside")
        write_run(self.d, "unfused", "after", unfused=True,
                  te_call_unfused=changes.get("te_call_unfused", 0))
        write_run(self.d, "auto", "after",
                  probes=changes.get("auto_probes", ("te-call", "python-hook")))
        write_profile(self.d, agent_events=changes.get("agent_events", 64),
                      err=changes.get("err", ""))

    def compare(self):
        rows = self.d / "rows.jsonl"
        done = subprocess.run([sys.executable, str(COMPARE), str(self.d), "--fp8audit",
                               str(self.fake), "--jsonl", str(rows)], capture_output=True,
                              text=True, timeout=120)
        parsed = [json.loads(line) for line in rows.read_text().splitlines()] \
            if rows.exists() else []
        return done, parsed

    def disagreeing(self, rows):
        return [(r["run"], r["layout"]) for r in rows if not r["agree"]]

    def test_agreeing_runs_exit_0_with_every_row_yes(self):
        self.results()
        done, rows = self.compare()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertEqual(len(rows), 2 * 4 + 1)
        self.assertEqual(self.disagreeing(rows), [])
        self.assertIn("| all_after | after | reentrant-per-layer | 4/3 | 4/3 | 4/3 | 4/3 | 4/3 "
                      "| 4/3 | yes |", done.stdout)
        self.assertIn("| unfused | after | none | 1/1 | 0/0 | 1/1 | 0/0 | 1/1 | 1/1 | yes (te-call "
                      "and kernel saw nothing) |", done.stdout)
        self.assertIn("CUDA events 64 (alone 64)", done.stdout)

    def test_a_probe_missing_an_update_fails_its_row(self):
        self.results(cupti_miss=1)
        done, rows = self.compare()
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.disagreeing(rows), [("all_after", "reentrant-per-layer")])
        self.assertEqual([r["kernel"] for r in rows if r["layout"] == "reentrant-per-layer" and
                          r["run"] == "all_after"], ["4/2"])

    def test_c_probes_counting_under_the_unfused_path_fail(self):
        self.results(te_call_unfused=1)
        done, rows = self.compare()
        self.assertEqual(done.returncode, 1)
        self.assertEqual({r for r, _ in self.disagreeing(rows)}, {"unfused"})

    def test_the_kernel_probe_in_an_auto_runs_header_fails(self):
        self.results(auto_probes=("te-call", "kernel", "python-hook"))
        done, rows = self.compare()
        self.assertEqual(done.returncode, 1)
        self.assertEqual({r for r, _ in self.disagreeing(rows)}, {"auto"})

    def test_the_kernel_probe_by_its_earlier_name_cupti_fails_too(self):
        self.results(auto_probes=("te-call", "cupti", "python-hook"))
        done, rows = self.compare()
        self.assertEqual(done.returncode, 1)
        self.assertEqual({r for r, _ in self.disagreeing(rows)}, {"auto"})

    def test_profiler_events_lost_or_a_subscriber_error_fail(self):
        self.results(agent_events=0)
        done, rows = self.compare()
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.disagreeing(rows), [("profile", "reentrant-per-layer")])
        self.results(err="CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED\n")
        self.assertEqual(self.compare()[0].returncode, 1)

    def test_missing_input_exits_2_with_one_line(self):
        self.results()
        os.remove(self.d / "unfused.events.jsonl")
        done, _ = self.compare()
        self.assertEqual(done.returncode, 2)
        self.assertIn("unfused.events.jsonl", done.stderr)


if __name__ == "__main__":
    unittest.main()
