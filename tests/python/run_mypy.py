"""CTest entry for the type check of python/fp8audit and the demo's table builder
(runtime/demo/side_by_side.py): mypy over them (its config in
pyproject.toml), or SKIP (exit 77) in one line when the interpreter has no mypy (scripts/setup.sh
puts it in the project's .venv)."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("mypy") is None:
    print(f"SKIP: {sys.executable} has no mypy (scripts/setup.sh installs it into .venv)")
    sys.exit(77)

from mypy import api  # noqa: E402

root = Path(__file__).resolve().parents[2]
out, err, status = api.run(["--config-file", str(root / "pyproject.toml"),
                            str(root / "python" / "fp8audit"),
                            str(root / "runtime" / "demo" / "side_by_side.py")])
sys.stdout.write(out)
sys.stderr.write(err)
sys.exit(status)
