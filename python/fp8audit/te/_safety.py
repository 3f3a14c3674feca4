"""The fix's own safety net (issue 33 item 3): where the patched ownership leaves a logical
microbatch without the backward update TE's own code would have made, say so at once.

TE gives the backward update to the first FP8 module that asks (a module with a backward node, in
DelayedScaling FP8); the fix gives it to one such module, or reserves it for a reentrant checkpoint
frame whose recompute hands it on. Per logical forward (an outermost autocast, not a recompute),
this counts the modules that asked outside any reserving frame and the grants, and follows the
frames that reserved. The backward update is lost when modules asked, none was granted, no
reserving frame was recomputed (a recompute hands the ownership on), none can still be (each
was freed without its recompute), and a backward ran for that forward: TE alone would have updated
through the first of those modules. A backward ran when a frame was freed while its forward still
ran (it had no backward node: the backward of the rest of the graph owes the update) or when another
frame of the same forward was recomputed; a forward whose backward never runs (validation with
grad, a step skipped on a NaN loss) frees its frames with no update owed, as TE alone makes none.
A frame left out of the loss, whose forward's backward recomputes no other frame, is not seen.
Then the fix prints one line on stderr (the first time; `lost` counts them all), records it among
its problems (never raising: it is found inside TE's own calls), and sends the agent the NVTX
mark `fp8audit.te.lost pass=backward reason=...`, which the audit reports as a failing microbatch
("the fix lost this update"), never as one without a backward pass."""

from __future__ import annotations

import sys
from typing import Callable, Dict, Optional, Set

from fp8audit import _nvtx
from fp8audit._markers import HOOK_LOST_MARK


class _Forward:
    def __init__(self) -> None:
        self.open = True
        self.asked = 0
        self.granted = 0  # ownerships given to a module, or handed on by a frame's recompute
        self.reserving: Set[int] = set()  # frames holding the ownership, not yet recomputed
        self.freed: Set[int] = set()  # of those, freed without their recompute
        self.freed_in_forward = False  # one of those freed before the forward ended: no node
        self.backward = False  # another frame of this forward was recomputed: a backward ran
        self.reported = False


class LostUpdates:
    """Fed by the Controller; `problem` records a violation (it must not raise)."""

    def __init__(self, problem: Callable[[str], None]) -> None:
        self.problem = problem
        self.current: Optional[_Forward] = None
        self.frames: Dict[int, _Forward] = {}  # frames opened in a logical forward, to its end
        self.lost = 0

    def forward_begins(self) -> None:
        self.current = _Forward()

    def asked(self, granted: bool) -> None:
        if self.current is not None and self.current.open:
            self.current.asked += 1
            self.current.granted += int(granted)

    def opened(self, frame: int, reserving: bool) -> None:
        """A checkpoint frame that can be recomputed opened; `reserving`: it holds the backward
        update."""
        if self.current is not None and self.current.open:
            if reserving:
                self.current.reserving.add(frame)
            self.frames[frame] = self.current

    def recomputed(self, frame: int) -> None:
        forward = self.frames.pop(frame, None)
        if forward is None:
            return
        forward.backward = True
        if frame in forward.reserving:
            forward.reserving.discard(frame)
            forward.granted += 1
        else:
            self._judge(forward)

    def freed(self, frame: int) -> None:
        forward = self.frames.pop(frame, None)
        if forward is not None and frame in forward.reserving:
            forward.freed.add(frame)
            forward.freed_in_forward |= forward.open
            self._judge(forward)

    def forward_ends(self) -> None:
        if self.current is not None and self.current.open:
            self.current.open = False
            self._judge(self.current)

    def _judge(self, forward: _Forward) -> None:
        if forward.open or forward.reported or forward.asked == 0 or forward.granted > 0:
            return
        if forward.reserving - forward.freed:
            return  # a frame can still be recomputed and hand the ownership on
        if forward.freed and not (forward.freed_in_forward or forward.backward):
            return  # no backward ran for this forward (yet): TE alone would not update either
        forward.reported = True
        self.lost += 1
        why = ("a checkpoint frame held the ownership and was freed without its recompute"
               if forward.freed else "no module was given the ownership")
        message = (f"fp8audit.te: the fix lost a backward update: in this microbatch "
                   f"{forward.asked} FP8 module(s) with a backward pass could own it and TE alone "
                   f"would have updated once; {why}. Its backward scales froze; please report "
                   "this job's layout (fp8audit run records it)")
        if self.lost == 1:
            print(message, file=sys.stderr, flush=True)
        _nvtx.mark(f"{HOOK_LOST_MARK} pass=backward reason="
                   f"{'freed-frame' if forward.freed else 'no-owner'}")
        self.problem(message)
