"""CTest entry for the Python suites: runs pytest on the given files, or reports SKIP (exit 77)
in one line when the interpreter lacks torch or pytest."""

import importlib.util
import sys

missing = [m for m in ("torch", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: {sys.executable} has no {' or '.join(missing)} (set FP8AUDIT_PYTHON to a Python "
          "with torch and pytest, e.g. the project's .venv)")
    sys.exit(77)

import pytest  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
