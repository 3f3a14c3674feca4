#!/usr/bin/env python3
"""Turns te_fix.py's JSON lines into the README table of issue 14's live acceptance.

Per layout and backward placement: TE's counter unpatched against the model's te-2.20 prediction
(tests/live_te/scenarios/<layout>.textproto) and, when given, the agent's counts; TE's counter
patched against the fixed model (1/1) and the agent; stash left; bitwise equality with the
no-checkpoint twin; where unpatched duplicates first changed FP8 state (against the twin). Also
the scenario rows (state/scenarios on real TE) and the timing lines. Exit 1 when any row disagrees, 2 on bad input.

  te_fix_compare.py OUT/fix_after.jsonl OUT/fix_inside.jsonl [--fp8audit BUILD/bin/fp8audit]
      [--agent OUT/agent_after.jsonl=OUT/agent_after.json]

With --fp8audit, also the model's classification of each unpatched microbatch's extra updates
(harmful: advances some module's amax history and scale; wasted: changes nothing) against what
TE did: te_fix.py records, per direction, how many of TE's updates changed a module's state, how
many modules no update moved (silent) and how many had never moved before the microbatch (cold:
still at TE's initial scale, where the gradient they pass on can underflow to a zero amax). TE's
kernel rolls a history only for a nonzero amax, which the model cannot see: where a direction has
silent or cold modules the model's harmful count is an upper bound; elsewhere it must be exact.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(HERE))
from live_tables import Counts, fail, report_counts  # noqa: E402


def read_lines(path: Path) -> List[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    return []


def cell(values: List[Counts]) -> str:
    distinct = sorted(set(tuple(v) for v in values))
    return " ".join(f"{f}/{b}" for f, b in distinct) if distinct else "-"


@functools.lru_cache(maxsize=None)
def scenario_path(layout: str, backward: str) -> Path:
    """The layout's scenario for the model; for backward inside, its program put in the autocast
    te_fix.py opens around the microbatch (whatever the layout opens itself: inner-autocast
    layouts open none of their own), written once per layout for the counts and the effects."""
    path = HERE / "scenarios" / f"{layout}.textproto"
    if backward != "inside":
        return path
    text = path.read_text()
    body = "".join(f"body {{ {line[len('program {'):].rstrip()[:-1].strip()} }} "
                   for line in text.splitlines() if line.startswith("program {"))
    rest = "\n".join(line for line in text.splitlines() if not line.startswith("program {"))
    with tempfile.NamedTemporaryFile("w", suffix=".textproto", delete=False) as f:
        f.write(f"{rest}\nprogram {{ autocast {{ {body}}} }}\nbackward: INSIDE_AUTOCAST\n")
    return Path(f.name)


def modelled(layout: str) -> bool:
    """Whether the layout has a scenario (CUDA-graph capture and te.ops fusers have none: the
    model does not describe them)."""
    return (HERE / "scenarios" / f"{layout}.textproto").is_file()


def refused(layout: str) -> bool:
    """Whether the fix refuses the layout by design (te_layouts.Layout.refused)."""
    from te_layouts import LAYOUTS

    return layout in LAYOUTS and LAYOUTS[layout].refused


def predict(layout: str, semantics: str, n: int, backward: str) -> List[Counts]:
    from fp8audit.te import _model

    return _model.run_scenario(str(scenario_path(layout, backward)), semantics, n)


Effects = Tuple[int, int, int, int]  # harmful forward, backward; wasted forward, backward


def model_json(fp8audit: str, layout: str, n: int, backward: str, semantics: str) -> dict:
    """`fp8audit model --format json` on the layout's scenario."""
    cmd = [fp8audit, "model", str(scenario_path(layout, backward)), "--semantics", semantics,
           "--format", "json", "--microbatches", str(n)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode not in (0, 3):
        fail(f"{' '.join(cmd)}: exit {run.returncode}: {run.stderr.strip()}")
    return json.loads(run.stdout)


def model_effects(fp8audit: str, layout: str, n: int, backward: str,
                  semantics: str = "te-2.20") -> List[dict]:
    """Per microbatch, the semantics' expected counts and harmful/wasted extra updates."""
    return model_json(fp8audit, layout, n, backward, semantics)["microbatches"]


def model_raise(fp8audit: str, layout: str, n: int, backward: str,
                semantics: str) -> Optional[int]:
    """The first microbatch in which the semantics predicts TE raising (STASH_MISSING: a
    recompute with no stashed metadata), else None."""
    doc = model_json(fp8audit, layout, n, backward, semantics)
    hits = [v["microbatch"] for v in doc.get("violations", []) if v["kind"] == "STASH_MISSING"]
    return min(hits) if hits else None


def effects(m: dict) -> Effects:
    return (m.get("harmful_forward", 0), m.get("harmful_backward", 0),
            m.get("wasted_forward", 0), m.get("wasted_backward", 0))


def live_effects(mb: dict, model: dict) -> Optional[Effects]:
    """The model's rule on what TE did: of the updates beyond the expected ones, those that
    advanced state (some module's amax history or scale changed across the call) are harmful,
    the others wasted."""
    if mb.get("advancing") is None:
        return None
    out = []
    for count, advancing, expected in zip((mb["forward"], mb["backward"]), mb["advancing"],
                                          (model.get("expected_forward", 0),
                                           model.get("expected_backward", 0))):
        extra = max(0, count - expected)
        harmful = min(extra, max(0, advancing - expected))
        out.append((harmful, extra - harmful))
    return (out[0][0], out[1][0], out[0][1], out[1][1])


def effects_agree(live: Effects, model: Effects, mb: dict) -> bool:
    """Exact per direction with no silent or cold module; else the model's harmful count bounds
    TE's."""
    silent, cold = mb.get("silent") or [0, 0], mb.get("cold") or [0, 0]
    for d in (0, 1):
        if live[d] + live[d + 2] != model[d] + model[d + 2]:
            return False
        if live[d] != model[d] if not (silent[d] or cold[d]) else live[d] > model[d]:
            return False
    return True


def effects_cell(values: List[Effects]) -> str:
    distinct = sorted(set(values))
    return " ".join(f"{hf}/{hb} {wf}/{wb}" for hf, hb, wf, wb in distinct) if distinct else "-"


def split_agent(lines: List[dict], flat: List[Counts], report: Path) -> Dict[tuple, List[Counts]]:
    """The agent saw, per layout and mode, the run's microbatches then the twin's (of a run TE
    raised in, those up to the failing one, and no twin)."""
    out: Dict[tuple, List[Counts]] = {}
    i = 0
    for line in lines:
        if line["kind"] == "error":  # TE raised in this microbatch: the agent saw up to it
            i += line.get("microbatch", 0) + 1
            continue
        if line["kind"] != "layout":
            continue
        n = line["microbatches"]
        out[(line["layout"], line["mode"])] = flat[i:i + n]
        i += 2 * n
    if i != len(flat):
        fail(f"{report}: the agent saw {len(flat)} microbatches, the runs had {i}")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path, help="te_fix.py JSON lines")
    p.add_argument("--agent", action="append", default=[], metavar="JSONL=REPORT",
                   help="a te_fix.py --markers run under fp8audit run and its JSON report")
    p.add_argument("--fp8audit", help="the fp8audit command: checks the model's harmful/wasted "
                                      "classification of the unpatched extra updates against TE")
    p.add_argument("--semantics", default="te-2.20",
                   help="the model's semantics for the unpatched runs (the release's: te-2.19 for "
                        "TE 2.19.0)")
    args = p.parse_args(argv)
    agents: Dict[Path, Path] = {}
    for spec in args.agent:
        jsonl, _, report = spec.partition("=")
        agents[Path(jsonl)] = Path(report)

    rows: "OrderedDict[tuple, dict]" = OrderedDict()
    scenarios: List[dict] = []
    timings: List[dict] = []
    agent_counts: Dict[tuple, List[Counts]] = {}
    for path in list(args.results) + list(agents):
        lines = read_lines(path)
        by_hook = any(line.get("patched_by_hook") for line in lines if line["kind"] == "layout")
        if path in agents:
            for (layout, mode), counts in split_agent(
                    lines, report_counts(agents[path]), agents[path]).items():
                placement = next(line["backward_placement"] for line in lines
                                 if line["kind"] == "layout")
                agent_counts[(placement, layout, "patched" if by_hook else mode)] = counts
            if path not in args.results:
                continue
        for line in lines:
            if line["kind"] == "scenario":
                scenarios.append(line)
            elif line["kind"] in ("timing", "distributed_timing"):
                timings.append(line)
            elif line["kind"] == "error":
                row = rows.setdefault((line["backward_placement"], line["layout"]), {})
                row.setdefault(line["mode"], {"mbs": [], "layout": None})["error"] = line["error"]
            elif line["kind"] in ("microbatch", "layout"):
                mode = "patched" if by_hook else line["mode"]
                row = rows.setdefault((line["backward_placement"], line["layout"]), {})
                row.setdefault(mode, {"mbs": [], "layout": None})
                if line["kind"] == "microbatch":
                    row[mode]["mbs"].append(line)
                else:
                    row[mode]["layout"] = line

    disagreements = 0
    print(f"| backward | layout | TE unpatched | model {args.semantics} | agent unpatched | TE patched "
          "| model fixed | agent patched | stash left (patched) | = twin (patched) "
          "| unpatched state first differs | unpatched extras harmful f/b wasted f/b: TE (model) "
          "| agree |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (placement, layout), modes in rows.items():
        un = modes.get("unpatched", {"mbs": [], "layout": None})
        pa = modes.get("patched", {"mbs": [], "layout": None})
        pa_error = pa.get("error", "").split(":")[0]
        te_un = [(m["forward"], m["backward"]) for m in un["mbs"]]
        te_pa = [(m["forward"], m["backward"]) for m in pa["mbs"]]
        n = max(len(te_un), len(te_pa))
        known = modelled(layout)
        model_un = predict(layout, args.semantics, n, placement)[:len(te_un)] \
            if te_un and known else []
        # TE raised in microbatch len(te_un): the model must predict that raise there.
        raised = un.get("error") and known and args.fp8audit
        model_raised = model_raise(args.fp8audit, layout, max(n, len(te_un) + 1), placement,
                                   args.semantics) if raised else None
        model_pa = predict(layout, "fixed", n, placement) if te_pa and known else []
        ag_un = agent_counts.get((placement, layout, "unpatched"))
        ag_pa = agent_counts.get((placement, layout, "patched"))
        stash = max((m["stash_left"] for m in pa["mbs"]), default=None)
        comparable = pa["layout"] and pa["layout"]["twin_comparable"]
        twin = all(m["state_equal"] and m["loss_equal"] and m["x_grad_equal"] and m["grads_equal"]
                   for m in pa["mbs"]) if pa["mbs"] else None
        first = un["layout"]["first_state_change"] if un["layout"] else None
        live_fx: List[Effects] = []
        model_fx: List[Effects] = []
        fx_ok = True
        if args.fp8audit and te_un and known:
            predicted = model_effects(args.fp8audit, layout, len(te_un), placement,
                                      args.semantics)
            fx = [live_effects(m, p) for m, p in zip(un["mbs"], predicted)]
            if all(f is not None for f in fx):
                live_fx = [f for f in fx if f is not None]
                model_fx = [effects(p) for p in predicted]
                fx_ok = len(live_fx) == len(model_fx) and all(
                    effects_agree(a, b, m) for a, b, m in zip(live_fx, model_fx, un["mbs"]))
        differing = [i for i, (a, b) in enumerate(zip(live_fx, model_fx)) if a != b]
        if not live_fx:
            fx_cell = "not checked"
        elif not differing:
            fx_cell = effects_cell(live_fx)
        else:
            why = sorted({tuple(un["mbs"][i].get("silent") or (0, 0))
                          + tuple(un["mbs"][i].get("cold") or (0, 0)) for i in differing})
            fx_cell = (f"{effects_cell(live_fx)} ({effects_cell(model_fx)}); differs in "
                       f"{len(differing)} microbatches from {differing[0]}, silent f/b cold f/b "
                       f"there: {', '.join('%d/%d %d/%d' % w for w in why)}")
        agree = ((not te_un or not known or te_un == model_un)
                 and (not raised or model_raised == len(te_un))
                 and (not te_pa or not known or te_pa == model_pa)
                 and fx_ok
                 and (ag_un is None or cell(ag_un) == cell(te_un))
                 and (ag_pa is None or cell(ag_pa) == cell(te_pa))
                 and (stash in (None, 0)) and (twin is not False or not comparable)
                 and (pa_error == "NotCovered" if refused(layout) else pa_error == ""))
        agree_cell = "yes" if agree else "NO"
        disagreements += not agree
        te_un_cell = f"TE raises {un['error'].split(':')[0]}" if un.get("error") else cell(te_un)
        if un.get("error"):  # counts before the raise, then where the raise came
            te_un_cell = f"{cell(te_un)}, then {te_un_cell}" if te_un else te_un_cell
        model_un_cell = cell(model_un) if model_un else "-"
        if raised:
            where = "no raise" if model_raised is None else f"raises in microbatch {model_raised}"
            model_un_cell = f"{model_un_cell}, {where}" if model_un else where
        te_pa_cell = ("refused (NotCovered)" if pa_error == "NotCovered" else
                      f"raises {pa_error}" if pa_error else cell(te_pa))
        print(f"| {placement} | {layout} | {te_un_cell} | "
              f"{model_un_cell if known else 'not modelled'} | "
              f"{cell(ag_un) if ag_un is not None else 'not run'} | {te_pa_cell} | "
              f"{cell(model_pa) if known else 'not modelled'} | {cell(ag_pa) if ag_pa is not None else 'not run'} | "
              f"{stash if stash is not None else '-'} | "
              f"{'n/a' if not comparable else ('yes' if twin else 'NO')} | "
              f"{'never' if first is None else 'microbatch %d, tensor %d' % (first['microbatch'], first['tensor'])} | "
              f"{fx_cell} | {agree_cell} |")
    if scenarios:
        print("\n| scenario (state/scenarios) | mode | TE | model | agree |\n|---|---|---|---|---|")
        for s in scenarios:
            semantics = "fixed" if s["mode"] == "patched" else args.semantics
            path = ROOT / "state" / "scenarios" / f"{s['scenario']}.textproto"
            from fp8audit.te import _model

            from fp8audit.te.limits import is_known_limit

            model = _model.run_scenario(str(path), semantics, len(s["counts"]))
            counts = [tuple(c) for c in s["counts"]]
            ok = counts == model
            limit = not ok and s["mode"] == "patched" and is_known_limit(s["scenario"], counts,
                                                                         model)
            disagreements += not ok and not limit
            verdict = "yes" if ok else "no: the fix's known limit (state/SEMANTICS.md)" if limit \
                else "NO"
            print(f"| {s['scenario']} | {s['mode']} | {cell(counts)} | {cell(model)} | {verdict} |")
    for t in timings:
        if t["kind"] == "distributed_timing":
            un, pa = t["unpatched"], t["patched"]
            print(f"\n28x7 decoder on {t['world_size']} ranks (H={t['hidden']}, {t['tokens']} "
                  f"tokens, amax all-reduce over the world), {t['rounds']} alternating rounds: "
                  f"amax all-reduces per microbatch {un['all_reduces_per_microbatch']:g} unpatched "
                  f"({un['all_reduce_bytes_per_microbatch'] / 1024:.1f} KiB), "
                  f"{pa['all_reduces_per_microbatch']:g} patched "
                  f"({pa['all_reduce_bytes_per_microbatch'] / 1024:.1f} KiB); median time per "
                  f"microbatch {un['median_ms']:.2f} ms unpatched, {pa['median_ms']:.2f} ms "
                  f"patched; ratio x{t['ratio_patched_over_unpatched']:.3f}")
            continue
        un_ms, pa_ms = statistics.median(t["unpatched_ms"]), statistics.median(t["patched_ms"])
        print(f"\ntime per microbatch, 28x7 decoder (H={t['hidden']}, {t['tokens']} tokens), "
              f"{t['rounds']} alternating rounds in one process, {len(t['unpatched_ms'])} "
              f"microbatches per mode: median {un_ms:.2f} ms unpatched, {pa_ms:.2f} ms patched; "
              f"ratio x{t['ratio']:.3f}")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
