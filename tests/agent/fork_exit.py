"""Forked Python children that leave through os._exit, under the preloaded agent.

Usage: fork_exit.py LIBRARY, where LIBRARY is tests/agent/nvtx_calls.cc's shared library. The
process records a microbatch, then two multiprocessing children (start method "fork": each ends in
os._exit, as multiprocessing makes it) and one os.fork child that calls os._exit itself record a
microbatch each; then the process records another and returns normally.
"""

import ctypes
import multiprocessing
import os
import sys


def microbatch(library: str) -> None:
    ctypes.CDLL(library).fp8audit_test_microbatch()


def main(library: str) -> int:
    microbatch(library)
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=microbatch, args=(library,)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        microbatch(library)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    microbatch(library)
    codes = [child.exitcode for child in children] + [os.waitstatus_to_exitcode(status)]
    print("children", *codes)
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
