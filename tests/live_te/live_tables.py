"""What the live-TE comparison scripts (compare.py, probes_compare.py, te_fix_compare.py,
megatron_compare.py, recipes_compare.py) share: one-line errors with exit 2, the per-microbatch
counts of a single-rank `fp8audit report --format json`, cutting the agent's flat microbatch list
into the script's runs, and a cell of per-microbatch values with each distinct run once."""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Mapping, NoReturn, Sequence, Tuple, TypeVar

Counts = Tuple[int, int]  # forward, backward updates of one microbatch
T = TypeVar("T")


def fail(message: str) -> NoReturn:
    """Bad or missing input: one line on stderr, exit 2."""
    print(f"{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    sys.exit(2)


def collapse(texts: Sequence[str], sep: str = " ") -> str:
    """Per-microbatch values as one cell: each distinct run of values once ("3/8 3/9"); "-" for
    none."""
    out: list[str] = []
    for text in texts:
        if not out or out[-1] != text:
            out.append(text)
    return sep.join(out) or "-"


def report_counts(path: Path) -> list[Counts]:
    """All microbatches of the single rank in an `fp8audit report --format json` file."""
    try:
        report = json.loads(path.read_text())
        (rank,) = report["ranks"]
        return [(m.get("forward_updates", 0), m.get("backward_updates", 0))
                for m in rank["microbatches"]]
    except (OSError, ValueError, KeyError) as e:
        fail(f"{path}: {e}")


def split_like(reference: Mapping[str, Sequence[object]], flat: Sequence[T],
               what: str) -> "OrderedDict[str, Sequence[T]]":
    """Cuts a flat microbatch list into the reference's runs, in the script's order."""
    total = sum(len(v) for v in reference.values())
    if len(flat) != total:
        fail(f"{what}: {len(flat)} microbatches, the script ran {total}")
    out: "OrderedDict[str, Sequence[T]]" = OrderedDict()
    i = 0
    for name, rows in reference.items():
        out[name] = flat[i:i + len(rows)]
        i += len(rows)
    return out
