"""Where fp8audit's native parts are: the `fp8audit` executable and the libraries in lib/.

Layouts, looked at in this order after an environment variable naming the file:
  wheel     <site-packages>/fp8audit/{bin,lib}/ beside these modules (pip install);
  prefix    <prefix>/lib/python/fp8audit -> <prefix>/bin, <prefix>/lib (cmake --install, which
            puts _prefix.py beside these modules: only an installed tree looks outside itself);
  source    <checkout>/python/fp8audit -> <checkout>/build*/bin, build*/lib (a checkout: its
            CMakeLists.txt beside python/).
Nothing else is looked at: never a directory above the package that another user could fill (a
checkout right under /tmp has /tmp/bin above it). The `fp8audit` on PATH is not looked at: it may
be this package's own entry point."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

PACKAGE = Path(__file__).resolve().parent


def _candidates(kind: str, name: str) -> List[Path]:
    out = [PACKAGE / kind / name]  # wheel
    if (PACKAGE / "_prefix.py").is_file() and PACKAGE.parent.name == "python" and \
            PACKAGE.parents[1].name == "lib":
        out.append(PACKAGE.parents[2] / kind / name)  # <prefix>/lib/python/fp8audit -> <prefix>
    checkout = PACKAGE.parents[1]  # <checkout>/python/fp8audit -> <checkout>
    if PACKAGE.parent.name == "python" and (checkout / "CMakeLists.txt").is_file():
        out.extend(sorted(checkout.glob(f"build*/{kind}/{name}")))
    return out


def find(kind: str, name: str, env: Optional[str] = None) -> Optional[Path]:
    """The first existing file `name` in bin/ or lib/ (`kind`), $env first when set and non-empty
    (then the only place looked at). None also where the file system cannot be asked (a process
    out of file descriptors, a path too long): it never raises."""
    try:
        value = os.environ.get(env, "") if env else ""
        if value:
            return Path(value) if Path(value).is_file() else None
        for path in _candidates(kind, name):
            if path.is_file():
                return path
    except (OSError, ValueError):
        pass
    return None


def looked_at(kind: str, name: str, env: Optional[str] = None) -> str:
    """Where find() looked, for error messages."""
    try:
        places = [str(p) for p in _candidates(kind, name)]
    except (OSError, ValueError) as e:
        places = [f"(the package's directories: {e})"]
    if env:
        places.insert(0, f"${env}")
    return ", ".join(places)


def binary() -> Optional[Path]:
    """The fp8audit executable ($FP8AUDIT_BIN, else the layouts above)."""
    return find("bin", "fp8audit", "FP8AUDIT_BIN")
