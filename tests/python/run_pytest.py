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

# --skipped-is-skip: a run whose every selected test skipped reports SKIP (77), not a pass.
args = [a for a in sys.argv[1:] if a != "--skipped-is-skip"]


class _Outcomes:
    def __init__(self) -> None:
        self.ran = self.skipped = 0

    def pytest_runtest_logreport(self, report):  # type: ignore[no-untyped-def]
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.ran += 1
            self.skipped += int(report.skipped)


outcomes = _Outcomes()
code = pytest.main(["-q", "-p", "no:cacheprovider", *args], plugins=[outcomes])
if code == 0 and len(args) != len(sys.argv) - 1 and outcomes.ran and \
        outcomes.ran == outcomes.skipped:
    print("SKIP: every selected test skipped")
    sys.exit(77)
sys.exit(code)
