#!/usr/bin/env python3
"""The table of te_suite.sh: per TE test file, passed / failed (and errors) / skipped, plain and
under `fp8audit run --fix-te`, and every test whose outcome differs. With the agent's reports
(OUT/traces-NAME-KIND.json) it also says, per run, how many microbatches the audit found and how
many failed with which counts. Exit 1 when some outcome differs, 2 on bad input.

    te_suite_compare.py OUT"""

from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Tuple

from live_tables import fail


def outcomes(path: Path) -> Dict[str, str]:
    """test id -> passed | failed | skipped, from a JUnit XML file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        fail(f"{path}: {e}")
    out = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        elif case.find("skipped") is not None:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def tally(o: Dict[str, str]) -> str:
    c = collections.Counter(o.values())
    return f"{c['passed']} / {c['failed']} / {c['skipped']}"


def audit(path: Path) -> str:
    """Microbatches of an agent report and the counts of the failing ones."""
    if not path.is_file():
        return "no report"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable ({e})"
    total = failing = 0
    counts: collections.Counter = collections.Counter()
    for rank in report.get("ranks", []):
        for m in rank.get("microbatches", []):
            total += 1
            if m.get("verdict") == "FAIL":
                failing += 1
                counts[(m.get("forward_updates", 0), m.get("backward_updates", 0))] += 1
    shown = ", ".join(f"{f}/{b} x{n}" for (f, b), n in counts.most_common(4))
    return f"{total} microbatches, {failing} failing" + (f" ({shown})" if shown else "")


def main(argv: List[str]) -> int:
    if len(argv) != 1:
        fail("usage: te_suite_compare.py OUT")
    out = Path(argv[0])
    names = sorted({p.name.rsplit("-", 1)[0] for p in out.glob("*-plain.xml")})
    if not names:
        fail(f"{out}: no *-plain.xml")
    print("| file | plain: passed / failed / skipped | --fix-te | differing tests | audit "
          "under --fix-te | audit unpatched |")
    print("|---|---|---|---|---|---|")
    differ: List[Tuple[str, str, str, str]] = []
    for name in names:
        plain = outcomes(out / f"{name}-plain.xml")
        fixed_path = out / f"{name}-fix.xml"
        fixed = outcomes(fixed_path) if fixed_path.is_file() else {}
        diffs = [(t, plain.get(t, "absent"), fixed.get(t, "absent"))
                 for t in sorted(set(plain) | set(fixed)) if plain.get(t) != fixed.get(t)]
        differ += [(name, *d) for d in diffs]
        agent = out / f"traces-{name}-agent.json"
        print(f"| {name} | {tally(plain)} | {tally(fixed) if fixed else 'not run'} | "
              f"{len(diffs)} | {audit(out / f'traces-{name}-fix.json')} | "
              f"{audit(agent) if agent.is_file() else 'not run'} |")
    for name, test, a, b in differ[:50]:
        print(f"- {name}: {test}: plain {a}, --fix-te {b}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
