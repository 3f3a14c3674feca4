#!/usr/bin/env python3
"""The chrome-trace report opened by a real trace viewer: Chromium's DevTools Performance panel.

Writes a known trace with `fp8audit model` (3 layers, reentrant checkpoint per layer, te-legacy:
4 microbatches, each failing), and a copy of it as a second process, renders both with
`fp8audit report --format chrome-trace`, and hands the events to the trace engine of the
DevTools bundled with headless Chromium (the code behind the Performance panel's "Load profile",
driven over the DevTools protocol on a pipe). Checks what the engine built: a process per trace,
every thread track named as the file names it, as many slices per track as the file has B/E and
X events (instants are not slices there), the microbatch slices as the only roots of their track
(the passes nested inside them), and no warnings.

Usage: chrome_trace_browser_test.py --fp8audit BIN --workdir DIR
Without Chromium the test fails, unless FP8AUDIT_SKIP_BROWSER=1: then it exits 77 (skipped).
"""

import json
import os
import subprocess
import sys
import time

from chromium import browser_test_setup

# Runs in a devtools:// page: parses the events with DevTools' trace engine and describes the
# processes and threads it built.
ENGINE_PROBE = """async (events) => {
  const T = await import('./models/trace/trace.js');
  const model = T.TraceModel.Model.createWithAllHandlers();
  await model.parse(events);
  const parsed = model.parsedTrace(0);
  const data = parsed.data || parsed;
  const processes = [];
  for (const [pid, p] of data.Renderer.processes) {
    const threads = [];
    for (const [tid, t] of p.threads) {
      threads.push({tid: tid, name: t.name || null, entries: (t.entries || []).length,
                    roots: t.tree ? t.tree.roots.size : -1});
    }
    processes.push({pid: pid, threads: threads});
  }
  const warnings = [...((data.Warnings && data.Warnings.perWarning) || new Map()).keys()];
  return JSON.stringify({processes: processes, warnings: warnings});
}"""


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def run(cmd, expect_rc):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180)
    if proc.returncode not in expect_rc:
        fail("%s exited %d\nstderr:\n%s" % (" ".join(cmd), proc.returncode,
                                            proc.stderr.decode(errors="replace")[-4000:]))
    return proc


class DevTools:
    """Headless Chromium driven over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-framed)."""

    def __init__(self, browser, profile):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds():
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child_fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._id = 0

    def call(self, method, params=None, session=None, timeout=120):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        fail("%s: %s" % (method, reply["error"]))
                    return reply["result"]
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                fail("Chromium closed the DevTools pipe during " + method)
            self._buffer += chunk
        fail("no reply to %s in %d s" % (method, timeout))

    def close(self):
        self._proc.kill()
        self._proc.wait()


def main():
    args, browser, work = browser_test_setup()
    traces = os.path.join(work, "traces")
    os.makedirs(traces)
    first = os.path.join(traces, "a.fp8trace")
    # Two processes: the layout under TE's semantics and under the fixed one (a byte-identical
    # copy would be read once).
    for semantics, name in (("te-legacy", first), ("fixed", os.path.join(traces, "b.fp8trace"))):
        run([args.fp8audit, "model", "--layers", "3", "--checkpoint", "reentrant", "--segments",
             "per-layer", "--semantics", semantics, "--microbatches", "4", "--trace-out", name],
            expect_rc=(0,))
    out = os.path.join(work, "t.json")
    run([args.fp8audit, "report", traces, "--format", "chrome-trace", "-o", out], expect_rc=(3,))
    with open(out, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]

    # What the file says: thread names, and slices (B/E pairs, X) per track.
    names, slices, microbatches = {}, {}, 0
    for e in events:
        track = (e["pid"], e["tid"])
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[track] = e["args"]["name"]
        if e["ph"] in ("B", "X"):
            slices[track] = slices.get(track, 0) + 1
        if e["ph"] == "X" and e.get("cat", "").startswith("microbatch"):
            microbatches += 1
    if microbatches != 8:
        fail("%d microbatch slices in the file, expected 8" % microbatches)

    profile = os.path.join(work, "profile")
    os.makedirs(profile)
    # DevTools pages are internal pages: allowed for this profile only.
    with open(os.path.join(profile, "Local State"), "w") as f:
        json.dump({"internal_only_uis_enabled": True}, f)
    devtools = DevTools(browser, profile)
    try:
        target = devtools.call("Target.createTarget",
                               {"url": "devtools://devtools/bundled/devtools_app.html"})
        session = devtools.call("Target.attachToTarget",
                                {"targetId": target["targetId"], "flatten": True})["sessionId"]
        result = None
        for _ in range(60):  # until the page has loaded its modules
            reply = devtools.call("Runtime.evaluate", {
                "expression": "(" + ENGINE_PROBE + ")(" + json.dumps(events) + ")",
                "awaitPromise": True, "returnByValue": True}, session)
            if "exceptionDetails" not in reply:
                result = json.loads(reply["result"]["value"])
                break
            last_error = reply["exceptionDetails"]
            time.sleep(1)
        if result is None:
            fail("DevTools' trace engine did not load the trace: %s" % json.dumps(last_error)[:2000])
    finally:
        devtools.close()

    print("DevTools trace engine: %s" % json.dumps(result))
    if result["warnings"]:
        fail("warnings: %s" % result["warnings"])
    pids = sorted(p["pid"] for p in result["processes"])
    if pids != [1, 2]:
        fail("processes %s, expected [1, 2]" % pids)
    seen = 0
    for p in result["processes"]:
        for t in p["threads"]:
            track = (p["pid"], t["tid"])
            if track not in names:
                continue
            seen += 1
            if t["name"] != names[track]:
                fail("thread %s named %r, the file says %r" % (track, t["name"], names[track]))
            if t["entries"] != slices.get(track, 0):
                fail("thread %s (%s): %d slices, the file has %d" %
                     (track, names[track], t["entries"], slices.get(track, 0)))
            if t["tid"] == p["pid"] and t["roots"] != 4:
                fail("the microbatch track of process %d has %d roots, expected its 4 "
                     "microbatches (the passes nested in them)" % (p["pid"], t["roots"]))
    if seen != len(names):
        fail("DevTools built %d of the file's %d named tracks" % (seen, len(names)))
    print("PASS: %d processes, %d tracks, %d microbatch slices, every slice nested" %
          (len(pids), seen, microbatches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
