"""python -m fp8audit.te.fingerprint TE_PYTORCH_DIR [--check VERSION]

Prints the fingerprint of every function fp8audit.te replaces or relies on, read from a
Transformer Engine source tree (the transformer_engine/pytorch directory of a wheel or checkout,
nothing imported), after a comment line naming the tree's FP8 state layout (which decides the
targets). With --check, compares them with the table verified for VERSION and exits 1 on any
difference, 2 on unusable input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import _fingerprint, _targets, releases


def main(argv=None) -> int:
    """The command line above; returns its exit status (0 match or printed, 1 differs, 2 bad
    input)."""
    p = argparse.ArgumentParser(prog="python -m fp8audit.te.fingerprint",
                                description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path)
    p.add_argument("--check", metavar="VERSION")
    args = p.parse_args(argv)
    release = None
    if args.check is not None:
        release = releases.get(args.check)
        if release is None:
            print(f"fp8audit.te.fingerprint: {args.check} is not a verified release (verified: "
                  f"{', '.join(releases.verified())})", file=sys.stderr)
            return 2
    try:
        layout = _fingerprint.layout_of_source_tree(args.directory)
        targets = _targets.targets(release.state_layout if release else layout)
        found = _fingerprint.of_source_tree(args.directory, targets)
    except (OSError, SyntaxError) as e:
        print(f"fp8audit.te.fingerprint: {e}", file=sys.stderr)
        return 2
    if release is None:
        print(f"    # FP8 state layout: {layout}")
        for target, fp in found.items():
            print(f'    "{target}": "{fp}",')
        return 0
    bad = [t for t in targets if found.get(t) != release.fingerprints.get(t)]
    if layout != release.state_layout:
        print(f"differs: the FP8 state layout ({layout}, {args.check}: {release.state_layout})")
    for t in bad:
        print(f"differs: {t}")
    print(f"{len(targets) - len(bad)}/{len(targets)} match {args.check}")
    return 1 if bad or layout != release.state_layout else 0


if __name__ == "__main__":
    sys.exit(main())
