"""Checks `fp8audit report --format json` of a ddp_job.py run against the counts the job makes.

    python3 tests/multi_rank/check_counts.py REPORT.json --ranks 2 --microbatches 6 \
        [--disagree-rank 1 --disagree-at 2]

Expects exactly one trace per rank 0..ranks-1 (no trace of the launcher, no other process), each
whole, with `microbatches` microbatches of 1 forward and 1 backward update, except that the
disagreeing rank has 2 forward updates in microbatch --disagree-at; then the job-level
RANK_DISAGREEMENT violation naming that microbatch and nothing else at job level. Prints one line
per check and exits 1 when any fails, 2 on unreadable input.
"""
import argparse
import json
import sys


def check(report, ranks, microbatches, disagree_rank=None, disagree_at=None):
    """Returns the list of problems (empty: as expected). `report` is the parsed JSON."""
    problems = []
    # proto3 JSON leaves out fields at their default (0, "", false): read them with defaults.
    seen = {}
    for trace in report.get("ranks", []):
        rank = trace.get("rank", 0)
        header = trace.get("header")
        path = trace.get("path", "?")
        if header is None:
            problems.append(f"{path}: no readable header")
            continue
        if header.get("parent_pid", 0) != 0:
            problems.append(f"{path}: a forked child's trace (pid {header.get('pid', 0)})")
            continue
        if rank < 0 or rank >= ranks:
            problems.append(f"{path}: a trace of rank {rank}, not one of the job's ranks "
                            f"0..{ranks - 1} (the launcher's, or another process's?)")
            continue
        if rank in seen:
            problems.append(f"{path}: a second trace of rank {rank} "
                            f"(the first: {seen[rank].get('path', '?')})")
            continue
        seen[rank] = trace
    for rank in range(ranks):
        if rank not in seen:
            problems.append(f"no trace of rank {rank}")

    for rank, trace in sorted(seen.items()):
        where = f"rank {rank}"
        if trace.get("damage"):
            problems.append(f"{where}: trace damaged: {trace['damage']}")
        rows = trace.get("microbatches", [])
        total = trace.get("totals", {}).get("microbatches", 0)
        if total != microbatches or len(rows) != microbatches:
            problems.append(f"{where}: {total} microbatches ({len(rows)} rows), "
                            f"expected {microbatches}")
        for i, row in enumerate(rows):
            index = row.get("index", 0)
            want_f = 2 if (rank == disagree_rank and index == disagree_at) else 1
            got = (row.get("forward_updates", 0), row.get("backward_updates", 0))
            if index != i:
                problems.append(f"{where}: row {i} is microbatch {index}")
            if got != (want_f, 1):
                problems.append(f"{where}: microbatch {index} has {got[0]}/{got[1]} updates,"
                                f" expected {want_f}/1")

    job = report.get("violations", [])
    if disagree_rank is None:
        for v in job:
            problems.append(f"unexpected job violation: {v.get('message', '')}")
        if report.get("verdict") != "PASS":
            problems.append(f"job verdict {report.get('verdict')}, expected PASS")
    else:
        wanted = [v for v in job
                  if v.get("kind") == "RANK_DISAGREEMENT" and v.get("microbatch", 0) == disagree_at
                  and f"rank {disagree_rank}: 2/1" in v.get("message", "")]
        if len(wanted) != 1:
            problems.append(f"no job violation saying that rank {disagree_rank} disagrees in "
                            f"microbatch {disagree_at} (job violations: "
                            f"{[v.get('message', '') for v in job]})")
        for v in job:
            if v not in wanted:
                problems.append(f"unexpected job violation: {v.get('message', '')}")
        if report.get("verdict") != "FAIL":
            problems.append(f"job verdict {report.get('verdict')}, expected FAIL")
    return problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--microbatches", type=int, required=True)
    p.add_argument("--disagree-rank", type=int)
    p.add_argument("--disagree-at", type=int)
    args = p.parse_args(argv)
    if (args.disagree_rank is None) != (args.disagree_at is None):
        p.error("--disagree-rank and --disagree-at go together")
    try:
        with open(args.report, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL cannot read {args.report}: {e}")
        return 2
    problems = check(report, args.ranks, args.microbatches, args.disagree_rank, args.disagree_at)
    for problem in problems:
        print("FAIL " + problem)
    what = (f"{args.ranks} ranks x {args.microbatches} microbatches of 1/1"
            + (f", rank {args.disagree_rank} 2/1 in microbatch {args.disagree_at} and the job's"
               " disagreement flagged" if args.disagree_rank is not None else ", ranks agreeing"))
    print(("ok   " if not problems else "FAIL ") + what)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
