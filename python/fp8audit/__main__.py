"""`python -m fp8audit ARGS...` and the `fp8audit` entry point of a pip install: replace this
process with the fp8audit executable (fp8audit/bin/fp8audit in the wheel; fp8audit._paths says
where else it is looked for), so `python -m fp8audit run -- torchrun ...` is `fp8audit run -- ...`."""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from fp8audit import _paths


def main(argv: Optional[List[str]] = None) -> int:
    """Replaces this process with `fp8audit ARGS...` (argv, else sys.argv[1:]); returns 2 when the
    executable is not found, 126 when it cannot be run."""
    args = sys.argv[1:] if argv is None else argv
    binary = _paths.binary()
    if binary is None:
        print("fp8audit: the fp8audit executable was not found (looked at "
              f"{_paths.looked_at('bin', 'fp8audit', 'FP8AUDIT_BIN')})", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(str(binary), [str(binary), *args])
    except OSError as e:
        print(f"fp8audit: cannot run {binary}: {e.strerror}", file=sys.stderr)
        return 126
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
