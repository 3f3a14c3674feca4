#!/usr/bin/env python3
"""The table of issue 13's live acceptance, from one run_probes_live.sh results directory.

Per layout and microbatch it puts side by side TE's own counter (te_counts.py's lines), the
updates each probe saw in the trace (agent_trace_events lines, microbatches cut at the
fp8audit.microbatch markers; a probe's cross-checks count for it), the counts the report made
(`fp8audit report --format json`) and the ownership model's te-2.20 prediction (`fp8audit model`).
Rows: `all` (--probe all: every cell equal), `unfused` (NVTE_UNFUSED_FP8_UPDATE=1: the te-call and
CUPTI probes see nothing, the Python hook and the report equal TE and the model), `auto` (the
default choice without markers: the report equals TE and the model, no CUPTI in the header) and
`profile` (torch.profiler's CUDA events under the agent equal those without it; the report equals
TE's counter; no CUPTI subscriber error). Prints a markdown table; exits 1 when a row disagrees,
2 on missing or malformed input. --jsonl FILE writes every row as a JSON line.
"""
import argparse
import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import MODEL_LAYOUTS  # noqa: E402  (layout -> fp8audit model flags)
from live_tables import fail, report_counts, split_like  # noqa: E402

SOURCES = (("TE_CALL", "te-call"), ("PYTHON_HOOK", "python hook"), ("KERNEL", "kernel"))
FORWARD = {"UPDATE_FORWARD", "CROSSCHECK_UPDATE_FORWARD"}
BACKWARD = {"UPDATE_BACKWARD", "CROSSCHECK_UPDATE_BACKWARD"}
UNKNOWN = {"UPDATE", "CROSSCHECK_UPDATE"}


def json_lines(path):
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")


def te_counter(path):
    """layout -> [(forward, backward)] in microbatch order, from the script's own lines."""
    out = OrderedDict()
    for row in json_lines(path):
        if "microbatch" in row:
            out.setdefault(row["layout"], []).append((row["forward"], row["backward"]))
    return out


def direction(event):
    kind = event["kind"]
    if kind in FORWARD:
        return 0
    if kind in BACKWARD:
        return 1
    if kind in UNKNOWN:
        return 1 if event.get("pass") == "BACKWARD" else 0
    return None


def probe_counts(path):
    """(header, [ {source: [f, b]} per marked microbatch ]) from agent_trace_events lines."""
    header, microbatches, current = None, [], None
    for event in json_lines(path):
        if "header" in event:
            header = header or event["header"]
            continue
        if "footer" in event:
            continue
        if event["kind"] == "MICROBATCH_BEGIN":
            current = {source: [0, 0] for source, _ in SOURCES}
            microbatches.append(current)
            continue
        if event["kind"] == "MICROBATCH_END":
            current = None
            continue
        d = direction(event)
        if d is None or current is None or event["source"] not in current:
            continue
        current[event["source"]][d] += event.get("count") or 1
    return header or {}, microbatches


def model_counts(fp8audit, layout, backward):
    scenario = HERE / "scenarios" / f"{layout}.textproto"
    if backward == "after" and scenario.is_file():
        cmd = [fp8audit, "model", str(scenario)]
    else:
        layers, per_layer, checkpoint, segments = MODEL_LAYOUTS[layout]
        cmd = [fp8audit, "model", "--layers", str(layers), "--linears-per-layer", str(per_layer),
               "--checkpoint", checkpoint, "--segments", segments, "--backward", backward]
    cmd += ["--semantics", "te-2.20", "--microbatches", "2", "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        fail(f"{' '.join(cmd)}: {done.stderr.strip() or 'no JSON'}")
    return [(m.get("forward_updates", 0), m.get("backward_updates", 0))
            for m in result["microbatches"]]


def cell(values):
    distinct = sorted(set(tuple(v) for v in values))
    return " ".join(f"{f}/{b}" for f, b in distinct) if distinct else "-"


class Table:
    def __init__(self, jsonl):
        self.rows, self.disagreements, self.jsonl = [], 0, jsonl
        print("| run | backward | layout | TE counter | te-call | python hook | kernel | report "
              "| model te-2.20 | agree |")
        print("|---|---|---|---|---|---|---|---|---|---|")

    def add(self, run, backward, layout, cells, agree, note=""):
        self.disagreements += not agree
        row = {"run": run, "backward": backward, "layout": layout, **cells, "agree": agree,
               "note": note}
        self.rows.append(row)
        keys = ("te_counter", "te_call", "python_hook", "kernel", "report", "model")
        print(f"| {run} | {backward} | {layout} | " + " | ".join(cells.get(k, "-") for k in keys)
              + f" | {'yes' if agree else 'NO'}{' (' + note + ')' if note else ''} |")

    def close(self):
        if self.jsonl:
            Path(self.jsonl).write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        return 1 if self.disagreements else 0


def single(cells, keys):
    values = {cells[k] for k in keys}
    return len(values) == 1 and " " not in next(iter(values)) and "-" not in values


def marked_runs(results, fp8audit, table):
    for name, backward, unfused in (("all_after", "after", False), ("all_inside", "inside", False),
                                    ("unfused", "after", True)):
        reference = te_counter(results / f"{name}.jsonl")
        header, seen = probe_counts(results / f"{name}.events.jsonl")
        seen = split_like(reference, seen, f"{name}.events.jsonl")
        report = split_like(reference, report_counts(results / f"{name}.report.json"),
                            f"{name}.report.json")
        for layout, counts in reference.items():
            cells = {"te_counter": cell(counts), "report": cell(report[layout]),
                     "model": cell(model_counts(fp8audit, layout, backward))}
            for source, key in SOURCES:
                cells[key.replace(" ", "_").replace("-", "_")] = cell(
                    [mb[source] for mb in seen[layout]])
            if unfused:
                agree = single(cells, ("te_counter", "python_hook", "report", "model")) and \
                    cells["te_call"] == "0/0" and cells["kernel"] == "0/0"
                note = "te-call and kernel saw nothing"
            else:
                agree = single(cells, ("te_counter", "te_call", "python_hook", "kernel", "report",
                                       "model"))
                note = ""
            table.add(name, backward, layout, cells, agree, note)


def auto_run(results, fp8audit, table):
    reference = te_counter(results / "auto.jsonl")
    header, _ = probe_counts(results / "auto.events.jsonl")
    report = split_like(reference, report_counts(results / "auto.report.json"), "auto.report.json")
    probes = header.get("probes", [])
    # The kernel probe (named "cupti" in traces before the one vocabulary) must stay off.
    no_kernel = not {"kernel", "cupti"} & set(probes) and "te-call" in probes
    for layout, counts in reference.items():
        cells = {"te_counter": cell(counts), "report": cell(report[layout]),
                 "model": cell(model_counts(fp8audit, layout, "after"))}
        agree = single(cells, ("te_counter", "report", "model")) and no_kernel
        table.add("auto", "after", layout, cells, agree, "probes " + ",".join(probes))


def profile_run(results, table):
    plain = [r for r in json_lines(results / "profile_plain.jsonl") if "cuda_events" in r]
    agent = [r for r in json_lines(results / "profile.jsonl") if "cuda_events" in r]
    if len(plain) != 1 or len(agent) != 1:
        fail("profile_plain.jsonl / profile.jsonl: no cuda_events line")
    reference = te_counter(results / "profile.jsonl")
    report = split_like(reference, report_counts(results / "profile.report.json"),
                        "profile.report.json")
    (layout, counts), = reference.items()
    err = (results / "profile.err").read_text(errors="replace")
    held = "MULTIPLE_SUBSCRIBERS" in err or "holds CUPTI" in err
    events = f"CUDA events {agent[0]['cuda_events']} (alone {plain[0]['cuda_events']})"
    cells = {"te_counter": cell(counts), "report": cell(report[layout])}
    agree = plain[0]["cuda_events"] > 0 and agent[0]["cuda_events"] == plain[0]["cuda_events"] \
        and cells["te_counter"] == cells["report"] and " " not in cells["report"] and not held
    table.add("profile", "after", layout, cells, agree, events)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="directory written by run_probes_live.sh")
    p.add_argument("--fp8audit", default="fp8audit", help="the fp8audit executable")
    p.add_argument("--jsonl", help="also write every row as a JSON line to this file")
    args = p.parse_args()
    table = Table(args.jsonl)
    marked_runs(args.results, args.fp8audit, table)
    auto_run(args.results, args.fp8audit, table)
    profile_run(args.results, table)
    return table.close()


if __name__ == "__main__":
    sys.exit(main())
