"""An eviction repeated at the widest guard: where the oblivious use model's block is evicted
at a narrower guard than its widest, the eviction is issued again at the widest guard's
point (``_core``, step 4).

Note [Evictions at the wider guards]
------------------------------------
A block of the lifetime-ends use model is guessed to be used within ``guard`` ticks of its
ALLOC (``_planner``, Note [Use ticks]); a narrower guard than the widest is chosen only
where the budget needs the room early (``_core``, Note [Selection]). Where the guess is
wrong -- a skip input read a dozen ops after its allocation, past an 8-tick guard -- the
read faults the block back, and it then stays on the device for the rest of the window
the budget counts it gone, so the driver makes room for every later claim by evicting the
least recently migrated data: the weights and the optimizer state, which fault back at
the optimizer step. Measured on ResNet-50 on GH200 C2C at 30% (oblivious): 553 MB of
driver evictions per iteration, 29 of the 42 ms of stall faults at the optimizer step.

So the eviction is issued again at the widest guard's eviction point, while the block is
still meant to be off the device (strictly between its eviction and its prefetch). Where
the guess held, the block is not on the device and the row costs one host call
(``hw.action_call_s``); where a read brought it back, it leaves again once the widest guard
has passed, as the budget assumed. It changes no window, no budget count and no
prediction. Where it misjudges, a block read again after the repeated eviction faults once
more where it would have stayed: oblivious plans, against none repeated (zoo, training
sizes): ResNet-50 GH200 30% 75.3 -> 51.9 ms, Inception-v3 GH200 30% 63.2 -> 57.3, PCIe
50% 173.7 -> 153.2; Llama-7B 2.9-3.4% slower on both profiles at 50% and 30%, where reads
far inside lifetimes are common. Repeating it at every wider guard (each level between)
cost Llama-7B 7.8-9.3% and Inception-v3 PCIe 30% 10.4%: the widest only.

Only where it can pay for itself: the repeated row costs one host call (``hw.action_call_s``;
the host makes the calls one after another, so on an iteration dense with actions it
delays the prefetches behind it), and the most it can save is the driver's write-back and
fault-back of the block's bytes (``overflow_ns_per_byte``); a block smaller than the call
over that price is left alone (generated workloads, ``bench_robust``: a U-Net whose hedged
blocks had a median of 512 bytes priced 0.6 ms worse per 3 ms iteration and fell back to
advice only, 30% slower). The sizes follow from the hardware profile: 37.5 KB on PCIe Gen5.

Only guessed uses: around a sampled touch the guard absorbs timing slack, the touch is
seen, and the repeated rows would only cost host calls (measured: sampled plans slower,
Inception-v3 on GH200 at 30% 46.4 -> 51.3 ms, when they were issued there too).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ._core import _Gap, _Timeline

__all__ = ["evictions_at_wider_guards"]


def evictions_at_wider_guards(tl: _Timeline, chosen: list[_Gap], evict_at: Callable,
                              prefetch_at: Callable) -> list[tuple[int, int, int]]:
    """``(event_unrolled, block, size)`` rows: the repeated evictions of Note [Evictions
    at the wider guards], each strictly between the gap's own eviction and its prefetch.
    ``evict_at(k, b)`` / ``prefetch_at(k, b)``: the issue point of control point ``k``
    for block ``b`` (``_core._issue_points``)."""
    guessed, size = tl.listed("end_lo"), tl.listed("size")
    # the smallest block whose overstay costs the driver more than the repeated call costs
    # the host (Note [Evictions at the wider guards])
    min_bytes = tl.p.action_call_ns / tl.p.overflow_ns_per_byte if tl.p.overflow_ns_per_byte \
        else 0.0
    out = []
    for g in chosen:
        if g.dead or g.level == 0 or guessed[g.blk] < 0 or size[g.blk] < min_bytes:
            continue
        k = evict_at(g.sibs[0].ke, g.blk)  # the widest guard's (level 0) eviction point
        if evict_at(g.ke, g.blk) < k < prefetch_at(g.kp, g.blk):
            out.append((k, g.blk, size[g.blk]))
    return out
