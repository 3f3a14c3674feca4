#!/usr/bin/env python3
"""The tables of run_megatron_live.sh (issue 19): per Megatron-core row, TE's own update counts
unpatched and patched (megatron_live.py), the ownership model's prediction (te-2.20 and fixed,
`fp8audit model` on scenarios/megatron/ROW.textproto), the agent's counts where the row ran
under `fp8audit run` (NAME.jsonl = the script's lines, NAME.json = the report), the recompute
stash left, and whether the patched run equals its no-recompute twin bitwise; then the HF +
Accelerate rows (hf_accelerate_live.py); then, per HF run under `fp8audit run` (--hf-agent), the
audit's recompute check against the script's own view (forward pre-hooks reading TE's FP8 state):
per microbatch the TE modules recomputed and those recomputed in another FP8 state than their
forward, which must match, and the verdict (FAIL exactly where a state changed). A Megatron row
the model predicts agrees only where it ran through unpatched; one without a scenario, only where
TE raised the exception RAISES records for it (selective-mlp: IndexError). Exit 1 when a row
disagrees, 2 on bad input.

--semantics te-3456 (tests/live_te/pr_3456/run.sh: rows run on TE with PR #3456's scheduling,
megatron_live.py --mode unpatched, since fp8audit.te.patch() refuses such a TE): the Megatron rows
alone, TE's counts against `fp8audit model --semantics te-3456` and the agent's, plain and under
--fix-te (NAME containing 'fix'), where the fix must stand aside: no run patched, and each report
chose te-3456 from TE's scheduling, and no agent's job raised; TE's PR state healthy after every
microbatch that did not fail (none succeeding: nothing checked, agreeing only in a row that raised
as expected). A row with a scenario agrees only where no microbatch failed; one without, only
where TE raised the exception RAISES expects of it (selective-mlp: IndexError, as on TE
2.20.2; a row that now runs says it needs a scenario). Two --agent runs of one row and mode:
exit 2.

    megatron_compare.py OUT --fp8audit BIN [--agent NAME.jsonl=NAME.json ...]
                        [--hf-agent NAME.jsonl=NAME.json[=EXIT] ...]
                        [--precision-agent ROW=NAME.json=EXIT ...]
    megatron_compare.py OUT --fp8audit BIN --semantics te-3456 [--agent NAME.jsonl=NAME.json ...]"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from live_tables import collapse, fail, report_counts

HERE = Path(__file__).resolve().parent
# Rows without a scenario and the exception TE raises in them unpatched (the type, before the
# ':'), in both tables: such a row agrees only where TE raised exactly that; any other exception,
# or none, is NO (RESULTS.md, "Megatron-core": TE 2.18.0 and 2.20.2, microbatch 0's first
# recompute).
RAISES = {"selective-mlp": "IndexError"}
Counts = Tuple[int, int]


def lines(path: Path) -> List[Dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")


def cell(counts: Sequence[Optional[Tuple[Optional[int], Optional[int]]]]) -> str:
    return collapse(["-" if c is None or None in c else f"{c[0]}/{c[1]}" for c in counts])


def without_scenario(row: str, error: Optional[str],
                     te: Sequence[Optional[Tuple[Optional[int], Optional[int]]]]) -> Tuple[bool, str]:
    """A row no scenario predicts, unpatched: whether it agrees (TE raised what RAISES records for
    it) and its cell."""
    expected = RAISES.get(row)
    if error is None:
        return False, f"ran {cell(te)}: " + (f"expected {expected}; " if expected else "") + \
            "needs a scenario"
    ok = raised(error) == expected
    return ok, f"raises {raised(error)}" + ("" if ok else f", expected {expected}" if expected
                                            else "; needs a scenario")


def model(binary: str, row: str, semantics: str, n: int) -> Optional[List[Counts]]:
    scenario = HERE / "scenarios" / "megatron" / f"{row}.textproto"
    if not scenario.is_file():
        return None
    try:
        done = subprocess.run([binary, "model", str(scenario), "--semantics", semantics,
                               "--microbatches", str(n), "--format", "json"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:  # its first stderr line alone: one line, whatever it printed
            said = next((x.strip() for x in done.stderr.splitlines() if x.strip()), "")
            fail(f"fp8audit model {scenario.name}: {said or f'exit {done.returncode}'}")
        return [(m.get("forward_updates", 0), m.get("backward_updates", 0))
                for m in json.loads(done.stdout)["microbatches"]]
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        fail(f"fp8audit model {scenario.name}: {e}")


def megatron_rows(out: Path, binary: str, agents: Dict[str, List[Counts]]) -> bool:
    print("| row | TE unpatched | model te-2.20 | agent unpatched | TE patched | model fixed | "
          "agent --fix-te | stash left (patched) | = twin (patched) | agree |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    for path in sorted(out.glob("mc_*.jsonl")):
        if path.name.startswith("mc_timing"):
            continue
        row = path.stem[3:]
        got = lines(path)
        mbs = {m: [x for x in got if x.get("kind") == "microbatch" and x["mode"] == m]
               for m in ("unpatched", "patched")}
        runs = {x["mode"]: x for x in got if x.get("kind") == "run"}
        if not runs:
            print(f"| {row} | not run | | | | | | | | NO |")
            ok = False
            continue
        te = {m: [(x.get("forward"), x.get("backward")) for x in v] for m, v in mbs.items()}
        error = (runs.get("unpatched", {}).get("errors") or [{}])[0].get("error")
        predicted = model(binary, row, "te-2.20", len(te["unpatched"]))
        fixed = model(binary, row, "fixed", len(te["patched"]))
        patched_ok = (bool(te["patched"]) and all(c == (1, 1) for c in te["patched"])
                      and not runs.get("patched", {}).get("errors")
                      and all(x.get("stash_left") == 0 for x in mbs["patched"])
                      and runs.get("patched", {}).get("bitwise_equal_to_twin") is True)
        # A row the model predicts must have run through: counts cut short by an error could
        # equal the prediction for as many microbatches (no wrong pass).
        if predicted is not None:
            unpatched_ok = error is None and te["unpatched"] == predicted
            unpatched = f"raises {raised(error)}" if error else cell(te["unpatched"])
        else:
            unpatched_ok, unpatched = without_scenario(row, error, te["unpatched"])
        agent_u = agents.get(f"{row}:unpatched")
        agent_p = agents.get(f"{row}:fix")
        agent_ok = (agent_u is None or (error is None and agent_u == te["unpatched"])) and \
            (agent_p is None or agent_p == te["patched"])
        fixed_ok = fixed is None or fixed == te["patched"]
        agree = patched_ok and unpatched_ok and agent_ok and fixed_ok
        ok = ok and agree
        print(f"| {row} | {unpatched} | {cell(predicted) if predicted else 'no scenario'} | "
              f"{cell(agent_u) if agent_u else 'not run'} | {cell(te['patched'])} | "
              f"{cell(fixed) if fixed else 'no scenario'} | "
              f"{cell(agent_p) if agent_p else 'not run'} | "
              f"{max((x.get('stash_left') or 0) for x in mbs['patched']) if mbs['patched'] else '-'}"
              f" | {'yes' if runs.get('patched', {}).get('bitwise_equal_to_twin') else 'no'} | "
              f"{'yes' if agree else 'NO'} |")
    return ok


def hf_rows(path: Path) -> bool:
    if not path.is_file():
        return True
    print()
    print("| HF + Accelerate checkpoint | mode | TE counts | recomputed TE modules with FP8 off | "
          "= twin | largest relative gradient difference | error | agree |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    got = lines(path)
    for run in (x for x in got if x.get("kind") == "run"):
        mbs = [x for x in got if x.get("kind") == "microbatch" and
               x["checkpoint"] == run["checkpoint"] and x["mode"] == run["mode"]]
        counts = [(x["forward"], x["backward"]) for x in mbs]
        off = max((len(x["fp8_mismatch"]) for x in mbs), default=0)
        recomputed = max((x["recomputed"] for x in mbs), default=0)
        twin = run["loss_first_difference"] is None and run["grads_first_difference"] is None
        error = (run.get("errors") or [{}])[0].get("error", "")
        agree = True
        if run["mode"] == "patched":
            agree = twin and off == 0 and not error and all(c == (1, 1) for c in counts)
            ok = ok and agree
        print(f"| {run['checkpoint']} | {run['mode']} | {cell(counts)} | {off} of {recomputed} | "
              f"{'yes' if twin else 'no'} | {run['grads_max_relative_difference']:.3g} | "
              f"{error.split(chr(10))[0][:80]} | {'yes' if agree else 'NO'} |")
    return ok


def report_rows(path: Path) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The single rank's microbatch rows and violations of an `fp8audit report --format json`."""
    try:
        (rank,) = json.loads(path.read_text())["ranks"]
        return rank.get("microbatches", []), rank.get("violations", [])
    except (OSError, ValueError, KeyError) as e:
        fail(f"{path}: {e}")


def hf_agent_rows(pairs: List[str]) -> bool:
    if not pairs:
        return True
    print()
    print("| HF checkpoint | under | agent counts | recomputes agent / script | FP8 changed agent / "
          "script | RECOMPUTE_PRECISION violations | failing microbatches | exit | agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for pair in pairs:
        script, report, *rest = pair.split("=")
        own = lines(Path(script))
        run = next((x for x in own if x.get("kind") == "run"), None)
        if run is None:
            fail(f"{script}: no run line")
        mine = [x for x in own if x.get("kind") == "microbatch" and x["mode"] == run["mode"]]
        rows, violations = report_rows(Path(report))
        if len(rows) < len(mine):
            fail(f"{report}: {len(rows)} microbatches, the script ran at least {len(mine)}")
        rows = rows[:len(mine)]  # then the twin's, without a checkpoint
        recomputes = [(r.get("recomputes", 0), m["recomputed"]) for r, m in zip(rows, mine)]
        changes = [(r.get("recompute_precision_changes", 0), len(m["fp8_mismatch"]))
                   for r, m in zip(rows, mine)]
        failing = [r.get("verdict") == "FAIL" for r in rows]
        precision = sum(v.get("kind") == "RECOMPUTE_PRECISION" for v in violations)
        counts = [(r.get("forward_updates", 0), r.get("backward_updates", 0)) for r in rows]
        agree = (all(a == b for a, b in recomputes) and all(a == b for a, b in changes) and
                 precision == sum(a > 0 for a, _ in changes) and
                 all(f or a == 0 for f, (a, _) in zip(failing, changes)))
        ok = ok and agree
        under = "--fix-te" if run.get("patched") else "unpatched"

        print(f"| {run['checkpoint']} | {under} | {cell(counts)} | "
              f"{cell(recomputes).replace('/', ' / ')} | {cell(changes).replace('/', ' / ')} | {precision} | {sum(failing)} of {len(rows)} | "
              f"{rest[0] if rest else '-'} | {'yes' if agree else 'NO'} |")
    return ok


def precision_rows(out: Path, specs: List[str]) -> bool:
    """Megatron rows under `fp8audit run` (ROW=NAME.json=EXIT): the audit's recompute check against
    the numerics. The audit must call a recompute's FP8 changed (RECOMPUTE_PRECISION, exit 3)
    exactly where that run's mode is not bitwise equal to the row's no-recompute twin
    (mc_ROW.jsonl), and pass with no change where it is."""
    if not specs:
        return True
    print()
    print("| row | under | recomputes per microbatch | FP8 changed | RECOMPUTE_PRECISION "
          "violations | exit | = twin (megatron_live.py) | agree |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for spec in specs:
        row, report, code = spec.split("=")
        rows, violations = report_rows(Path(report))
        under = "--fix-te" if "fix" in Path(report).stem else "unpatched"
        runs = {x["mode"]: x for x in lines(out / f"mc_{row}.jsonl") if x.get("kind") == "run"}
        twin = runs.get("patched" if under == "--fix-te" else "unpatched", {}).get(
            "bitwise_equal_to_twin")
        changes = [r.get("recompute_precision_changes", 0) for r in rows]
        precision = sum(v.get("kind") == "RECOMPUTE_PRECISION" for v in violations)
        changed = any(changes)
        agree = twin is not None and changed == (not twin) and (precision > 0) == changed and \
            code == ("3" if changed else "0")
        ok = ok and agree
        print(f"| {row} | {under} | {collapse([str(r.get('recomputes', 0)) for r in rows])} | "
              f"{collapse([str(c) for c in changes])} | {precision} | {code} | "
              f"{'-' if twin is None else 'yes' if twin else 'no'} | {'yes' if agree else 'NO'} |")
    return ok


PR_SEMANTICS = "te-3456"
PR_CHOSEN = "te-3456 (from scheduling)"  # what each agent's report must have chosen under the PR
PR_STATE = ("pending", "depth", "slot")  # megatron_live.py's record of TE's PR #3456 state


class PrAgent(NamedTuple):
    """One megatron_live.py --mode hook run under `fp8audit run` on TE with PR #3456."""
    name: str
    counts: List[Counts]
    patched: bool  # fp8audit.te.is_patched() in the job: the fix applied
    chosen: str  # the report's semantics and where it took them from
    error: Optional[str]  # the first exception the job raised under the agent (its run's errors)


def records(path: Path) -> List[Dict[str, Any]]:
    """megatron_live.py's lines, checked: each a JSON object with a kind; a microbatch or run line
    names its mode; errors, where given, are objects."""
    out: List[Dict[str, Any]] = []
    try:
        text = path.read_text()
    except OSError as e:
        fail(f"{path}: {e}")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            x = json.loads(line)
        except ValueError as e:
            fail(f"{path}:{number}: {e}")
        if not isinstance(x, dict) or not isinstance(x.get("kind"), str):
            fail(f"{path}:{number}: not a JSON object with a kind")
        if x["kind"] in ("microbatch", "run") and not isinstance(x.get("mode"), str):
            fail(f"{path}:{number}: a {x['kind']} line without a mode")
        errors = x.get("errors") or []
        if not isinstance(errors, list) or not all(isinstance(e, dict) for e in errors):
            fail(f"{path}:{number}: errors is not a list of objects")
        out.append(x)
    return out


def pr_agents(pairs: List[str]) -> Dict[str, PrAgent]:
    """--agent pairs under --semantics te-3456, keyed ROW:fix where NAME contains 'fix' (run under
    `fp8audit run --fix-te`), else ROW:plain: the fix stands aside under the PR, so the script's
    own `patched` cannot tell the two apart."""
    out: Dict[str, PrAgent] = {}
    for pair in pairs:
        script, sep, report = pair.partition("=")
        if not sep or not script or not report:
            fail(f"--agent {pair}: not NAME.jsonl=NAME.json")
        run = next((x for x in records(Path(script)) if x["kind"] == "run"), None)
        if run is None or not isinstance(run.get("row"), str):
            fail(f"{script}: no run line with a row")
        try:
            (rank,) = json.loads(Path(report).read_text())["ranks"]
            recording = rank.get("recording", {})
            chosen = (f"{recording.get('semantics') or 'none'} "
                      f"(from {recording.get('semantics_from') or '?'})")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            fail(f"{report}: {e}")
        name = Path(script).stem
        key = f"{run['row']}:{'fix' if 'fix' in name else 'plain'}"
        if key in out:
            fail(f"--agent {pair}: a second {key} run (the first: {out[key].name})")
        out[key] = PrAgent(name, report_counts(Path(report)), run.get("patched") is True, chosen,
                           first_error(run, []))
    return out


def first_error(run: Dict[str, Any], mbs: List[Dict[str, Any]]) -> Optional[str]:
    """The first error megatron_live.py recorded in a run (its run line's errors, else a
    microbatch marked failed), as "Type: message"; None where it recorded none."""
    for e in run.get("errors") or []:
        return str(e.get("error") or "an error without a message")
    return next((str(x["failed"]) for x in mbs if x.get("failed")), None)


def raised(error: str) -> str:
    """The exception's type in megatron_live.py's "Type: message" (one line, for a cell)."""
    return (error.strip().splitlines() or [""])[0].split(":")[0].strip()[:60] or "?"


def pr_healthy(mbs: List[Dict[str, Any]]) -> Optional[bool]:
    """Whether TE's PR state was healthy after every microbatch that did not fail (no update
    pending, no scope open, no callback slot held); None where megatron_live.py recorded none
    (a TE without the PR's scheduling) or where no microbatch succeeded (nothing to check)."""
    if not mbs or any(k not in x for x in mbs for k in PR_STATE):
        return None
    done = [x for x in mbs if not x.get("failed")]
    if not done:
        return None
    return all(not x["pending"] and x["depth"] == 0 and x["slot"] is None for x in done)


def pr_agent_cell(agent: Optional[PrAgent]) -> str:
    if agent is None:
        return "not run"
    return cell(agent.counts) + (f", raises {raised(agent.error)}" if agent.error else "")


def pr_rows(out: Path, binary: str, agents: Dict[str, PrAgent]) -> bool:
    """--semantics te-3456: the Megatron rows run on TE with PR #3456's scheduling."""
    print("| row | TE (PR #3456) | model te-3456 | agent | agent --fix-te | PR state healthy | "
          "stash left | = twin | agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    notes: List[str] = []
    rows = set()
    for path in sorted(out.glob("mc_*.jsonl")):
        if path.name.startswith("mc_timing"):
            continue
        row = path.stem[3:]
        rows.add(row)
        got = records(path)
        runs = [x for x in got if x["kind"] == "run"]
        run = next((x for x in runs if x["mode"] == "unpatched"), None)
        mbs = [x for x in got if x["kind"] == "microbatch" and x["mode"] == "unpatched"]
        if run is None or not mbs:
            print(f"| {row} | not run | | | | | | | NO |")
            ok = False
            continue
        te = [(x.get("forward"), x.get("backward")) for x in mbs]
        error = first_error(run, mbs)
        predicted = model(binary, row, PR_SEMANTICS, len(te))
        if predicted is not None:  # counts of a run cut short never stand for the prediction
            te_ok = error is None and te == predicted
            shown = cell(te) if error is None else f"raises {raised(error)} ({cell(te)})"
        else:
            te_ok, shown = without_scenario(row, error, te)
        plain, fix = agents.get(f"{row}:plain"), agents.get(f"{row}:fix")
        agent_ok = all(a is None or (error is None and a.error is None and a.counts == te and
                                     not a.patched and a.chosen == PR_CHOSEN)
                       for a in (plain, fix))
        applied = [x for x in runs if x.get("patched")]
        if applied:
            notes.append(f"- {row}: fp8audit.te applied in its {applied[0]['mode']} run "
                         "(under the PR it must stand aside)")
        healthy = pr_healthy(mbs)
        stated = all(k in x for x in mbs for k in PR_STATE)
        # only a row that raised as RAISES expects may have no microbatch to check the state of
        succeeded = any(not x.get("failed") for x in mbs)
        health_ok = healthy is True or (predicted is None and te_ok and stated and not succeeded)
        agree = te_ok and agent_ok and not applied and health_ok
        ok = ok and agree
        twin = run.get("bitwise_equal_to_twin")
        state = "no state" if not stated else "none succeeded" if not succeeded else \
            "yes" if healthy else "NO"
        print(f"| {row} | {shown} | "
              f"{cell(predicted) if predicted else 'no scenario'} | "
              f"{pr_agent_cell(plain)} | {pr_agent_cell(fix)} | {state} | "
              f"{max(x.get('stash_left') or 0 for x in mbs)} | "
              f"{'-' if twin is None else 'yes' if twin else 'no'} | {'yes' if agree else 'NO'} |")
    for key, a in sorted(agents.items()):
        row = key.rsplit(":", 1)[0]
        notes.append(f"- {a.name} ({'--fix-te' if key.endswith(':fix') else 'plain'}): "
                     f"semantics {a.chosen}, fp8audit.te {'' if a.patched else 'not '}applied"
                     + (f"; the job raised {a.error.splitlines()[0][:120]}" if a.error else "")
                     + ("" if row in rows else f"; no mc_{row}.jsonl"))
        ok = ok and row in rows
    if notes:
        print("\n" + "\n".join(notes))
    return ok


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--fp8audit", required=True)
    p.add_argument("--agent", action="append", default=[],
                   help="NAME.jsonl=NAME.json: the script's lines and the agent's report")
    p.add_argument("--hf-agent", action="append", default=[],
                   help="NAME.jsonl=NAME.json[=EXIT]: hf_accelerate_live.py --mode hook under "
                        "fp8audit run: its lines, the report and the run's exit status")
    p.add_argument("--precision-agent", action="append", default=[],
                   help="ROW=NAME.json=EXIT: megatron_live.py --mode hook of ROW under fp8audit "
                        "run (NAME containing 'fix': under --fix-te), its report and exit status")
    p.add_argument("--semantics", choices=["te-2.20", PR_SEMANTICS], default="te-2.20",
                   help="te-2.20: TE 2.20 unpatched (model te-2.20) and patched (model fixed); "
                        "te-3456: rows run on TE with PR #3456's scheduling (model te-3456), the "
                        "fix standing aside; Megatron rows only")
    args = p.parse_args(argv)
    if not args.out.is_dir():
        fail(f"{args.out}: not a directory")
    if args.semantics == PR_SEMANTICS:
        if args.hf_agent or args.precision_agent:
            fail("--semantics te-3456 tables the Megatron rows only (--hf-agent and "
                 "--precision-agent table the fix's runs)")
        return 0 if pr_rows(args.out, args.fp8audit, pr_agents(args.agent)) else 1
    agents: Dict[str, List[Counts]] = {}
    for pair in args.agent:
        script, _, report = pair.partition("=")
        own = lines(Path(script))
        run = next((x for x in own if x.get("kind") == "run"), None)
        if run is None:
            fail(f"{script}: no run line")
        key = f"{run['row']}:{'fix' if run['patched'] else 'unpatched'}"
        agents[key] = report_counts(Path(report))
    ok = megatron_rows(args.out, args.fp8audit, agents)
    ok = hf_rows(args.out / "hf.jsonl") and ok
    ok = hf_agent_rows(args.hf_agent) and ok
    ok = precision_rows(args.out, args.precision_agent) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
