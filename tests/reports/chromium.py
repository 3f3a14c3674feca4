"""Finding Chromium for the browser tests of reports/, and what a test does without it.

browser_test_setup() is what both tests do first. $CHROMIUM names the browser, else the first of BROWSERS on PATH. Without one a test fails (exit 1),
unless FP8AUDIT_SKIP_BROWSER=1: then it is skipped (exit 77, CTest's SKIP_RETURN_CODE).
"""

import argparse
import os
import shutil
import sys
from typing import Optional, Tuple

SKIP = 77
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> Optional[str]:
    """The browser's path: $CHROMIUM when set (None when it is not found), else one on PATH."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) else None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def browser_or_exit() -> str:
    """The browser's path; without one, exits 77 (skipped) under FP8AUDIT_SKIP_BROWSER=1, else 1."""
    browser = find_browser()
    if browser is not None:
        return browser
    if os.environ.get("FP8AUDIT_SKIP_BROWSER") == "1":
        print("SKIP: Chromium not found and FP8AUDIT_SKIP_BROWSER=1")
        sys.exit(SKIP)
    print("FAIL: Chromium not found (looked for %s, or $CHROMIUM): install it (`apt-get install "
          "chromium`, see scripts/setup.sh) or set FP8AUDIT_SKIP_BROWSER=1 to skip this test" %
          ", ".join(BROWSERS), file=sys.stderr)
    sys.exit(1)


def browser_test_setup() -> Tuple[argparse.Namespace, str, str]:
    """A browser test's start: its arguments (--fp8audit, --workdir), the browser (or exit as
    browser_or_exit does) and the work directory, emptied."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp8audit", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    browser = browser_or_exit()
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return args, browser, work
