#!/usr/bin/env python3
"""The HTML report in a real browser.

Writes a known trace with `fp8audit model` (3 layers, reentrant checkpoint per layer, te-legacy:
4 microbatches, each with 4 forward and 3 backward updates), renders it with
`fp8audit report --format html`, loads the page in headless Chromium, and checks the DOM Chromium
built (the microbatch rows, the timeline cells and their duplicate markers) and a screenshot (not
blank: varied pixels, the red of the FAIL header present).

Usage: html_browser_test.py --fp8audit BIN --workdir DIR
Without Chromium the test fails, unless FP8AUDIT_SKIP_BROWSER=1: then it exits 77 (skipped).
"""

import html.parser
import os
import struct
import subprocess
import sys
import zlib

from chromium import browser_test_setup


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def run(cmd, expect_rc=None, timeout=180):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if expect_rc is not None and proc.returncode not in expect_rc:
        fail("%s exited %d\nstdout:\n%s\nstderr:\n%s" %
             (" ".join(cmd), proc.returncode, proc.stdout.decode(errors="replace")[-4000:],
              proc.stderr.decode(errors="replace")[-4000:]))
    return proc


class Dom(html.parser.HTMLParser):
    """Collects the elements the checks need from Chromium's serialised DOM."""

    def __init__(self):
        super().__init__()
        self.rows = []      # (data-mb, class) of microbatch table rows
        self.row_last = []  # data-last of each row (the last microbatch of a run), or None
        self.cells = []     # (data-mb, class) of timeline cells
        self.dupmarks = 0   # duplicate markers drawn in timeline cells
        self.dup_counts = 0  # table cells of counts above the expectation
        self.scripts = 0
        self.external = []  # src/href that would fetch something
        self.verdict = None
        self._in_verdict = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "tr" and "mb" in cls:
            self.rows.append((a.get("data-mb"), cls))
            self.row_last.append(a.get("data-last"))
        if tag == "g" and "c" in cls and "data-mb" in a:
            self.cells.append((a.get("data-mb"), cls))
        if tag == "text" and "dupmark" in cls:
            self.dupmarks += 1
        if tag == "td" and "dup" in cls:
            self.dup_counts += 1
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            value = a.get(key)
            if value and not value.startswith("#"):
                self.external.append(value)
        if a.get("id") == "verdict":
            self._in_verdict = True

    def handle_data(self, data):
        if self._in_verdict:
            self.verdict = data.strip()
            self._in_verdict = False


def png_pixels(path):
    """Width, height, channels and rows of RGB(A) bytes of an 8-bit non-interlaced PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + " is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        fail(path + " has no IHDR")
    width, height, depth, color, _, _, interlace = header
    channels = {2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0:
        fail("unexpected PNG format: depth %d colour type %d interlace %d" %
             (depth, color, interlace))
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev, at = [], bytearray(stride), 0
    for _ in range(height):
        kind = raw[at]
        line = bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = prev[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                up_left = prev[i - channels] if i >= channels else 0
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
                line[i] = (line[i] + pred) & 0xFF
            elif kind != 0:
                fail("bad PNG filter %d" % kind)
        rows.append(line)
        prev = line
    return width, height, channels, rows


def check_screenshot(path):
    width, height, channels, rows = png_pixels(path)
    n, total, total_sq = 0, 0.0, 0.0
    colours = set()
    red = 0
    for y in range(0, height, 2):
        line = rows[y]
        for x in range(0, width, 2):
            r, g, b = line[x * channels], line[x * channels + 1], line[x * channels + 2]
            lum = 0.299 * r + 0.587 * g + 0.114 * b
            n += 1
            total += lum
            total_sq += lum * lum
            colours.add((r >> 3, g >> 3, b >> 3))
            if r > 170 and g < 90 and b < 90:
                red += 1
    mean = total / n
    variance = total_sq / n - mean * mean
    print("screenshot %dx%d: luminance variance %.1f, %d colours, %d red samples" %
          (width, height, variance, len(colours), red))
    if variance < 100:
        fail("the screenshot is blank or nearly so (luminance variance %.1f)" % variance)
    if len(colours) < 8:
        fail("the screenshot has only %d colours" % len(colours))
    if red < 500:
        fail("the screenshot lacks the red of the FAIL header and failing cells")


def main():
    args, browser, work = browser_test_setup()
    trace = os.path.join(work, "known.fp8trace")
    page = os.path.join(work, "known.html")
    shot = os.path.join(work, "known.png")

    run([args.fp8audit, "model", "--layers", "3", "--checkpoint", "reentrant", "--segments",
         "per-layer", "--semantics", "te-legacy", "--microbatches", "4", "--trace-out", trace],
        expect_rc=(0,))
    run([args.fp8audit, "report", trace, "--format", "html", "-o", page], expect_rc=(3,))

    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--user-data-dir=" + os.path.join(work, "profile"), "--no-first-run"]
    url = "file://" + page
    dom_text = run(common + ["--dump-dom", url], expect_rc=(0,)).stdout.decode("utf-8")
    dom = Dom()
    dom.feed(dom_text)

    if dom.verdict != "FAIL":
        fail("verdict %r, expected FAIL" % dom.verdict)
    # Four identical microbatches: one table row, 0-3.
    indices = [mb for mb, _ in dom.rows]
    if indices != ["0"] or dom.row_last != ["3"]:
        fail("microbatch rows %r (last %r), expected one row for 0..3" % (indices, dom.row_last))
    if not all("fail" in cls for _, cls in dom.rows):
        fail("every microbatch row should fail: %r" % dom.rows)
    cells = [mb for mb, _ in dom.cells]
    if cells != ["0", "1", "2", "3"]:
        fail("timeline cells %r, expected one per microbatch 0..3" % cells)
    if not all("dup" in cls and "fail" in cls for _, cls in dom.cells):
        fail("every timeline cell should be marked as failing with duplicates: %r" % dom.cells)
    # 4 forward and 3 backward updates against 1/1: both counts of all 4 microbatches are extra.
    if dom.dupmarks != 8:
        fail("%d duplicate markers in the timeline, expected 8" % dom.dupmarks)
    if dom.dup_counts != 2:
        fail("%d highlighted counts in the microbatch table, expected 2" % dom.dup_counts)
    if dom.scripts != 0 or dom.external:
        fail("the page is not self-contained: %d scripts, external %r" %
             (dom.scripts, dom.external))
    print("DOM: verdict %s, rows %s, cells %s, %d duplicate markers" %
          (dom.verdict, indices, cells, dom.dupmarks))

    run(common + ["--window-size=1280,1400", "--screenshot=" + shot, url], expect_rc=(0,))
    if not os.path.exists(shot):
        fail("Chromium wrote no screenshot")
    check_screenshot(shot)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
