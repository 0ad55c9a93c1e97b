"""The LP bound over schedules that lose nothing (``lp_bound(lossless=True)``).

Note [Lossless schedules]
-------------------------
Rationale. The LP of Note [The LP bound] lets a block's data vanish for free after its last
access, though the block is still allocated: any schedule the simulator can run may
discard it there. A plan that does so bets that the program will not read the data again
before it frees it; uvm_sched's plans never make that bet (they discard a block only at
its FREE, ``planner._actions``; the runtime's promise is that nothing is lost). On the zoo
this is where the LP's optimum goes where no such plan can follow: GPT-2 small's logits
(1.6 GB) are read for the last time one tick before the loss's peak and freed one tick
after it, so the optimum drops them at the peak while a plan must write them back or find
the room elsewhere.

Approach. Each block of the window is given one more access, of nothing (fraction 0,
neither read nor write), at the tick of its FREE in the window, or at the window's last
tick where it outlives the window without wrapping; a block whose last access is already
there gets none. Its live stretch then runs to that tick: its residency is counted against
the budget at every boundary up to it, and its dirty bytes leave only by a write-back (the
rows of Note [The LP bound] unchanged; the access's own row, ``c + d + q >= 0``, asks
nothing).

Why it is a lower bound on every lossless schedule the simulator runs. The argument of
Note [The LP bound] holds with "dead" narrowed to "freed": in a schedule that discards
only freed blocks, a block's bytes stay resident or reach the host until its FREE, which
is what the longer stretch asks. Data overwritten whole by a write that reads nothing is
still dead from its last read to that write (a birth starts a new stretch), which only
widens the choice: a relaxation of the exact lossless program. Blocks alive across the
whole window wrap as before, and blocks the window never accesses have no stretch (their
pages are never populated unless a plan asks, which costs it room the LP does not count:
again only a relaxation). The lossless program has more constraints on the same slots, so
its optimum is at least the unrestricted one's at the same partition; a larger program can
be coarsened further, so across caps compare both.
"""
from __future__ import annotations

import numpy as np

from ._prep import Prepared


def held_to_free(prep: Prepared, acc):
    """``acc`` (``_lp._accesses``'s per (block, window tick) arrays, sorted by block then
    tick) with each accessed block's access of nothing at its FREE (Note [Lossless
    schedules]); the same tuple, sorted the same way."""
    b, t, frac, rd, wr, m0 = acc
    if not len(b):
        return acc
    ws, we = prep.window
    last = np.flatnonzero(np.concatenate([b[1:] != b[:-1], [True]]))
    blk, last_t = b[last], t[last]
    ft = prep.bfree_tick[blk]
    freed_in = (ft >= ws) & (ft < we)
    wraps = (prep.balloc_tick[blk] < ws) & ~freed_in
    end = np.where(freed_in, ft - ws, we - 1 - ws)
    add = ~wraps & (end > last_t)
    if not add.any():
        return acc
    nb, nt = blk[add], end[add].astype(t.dtype)
    b2 = np.concatenate([b, nb])
    t2 = np.concatenate([t, nt])
    o = np.lexsort((t2, b2))
    zero = np.zeros(len(nb))
    return (b2[o], t2[o], np.concatenate([frac, zero])[o],
            np.concatenate([rd, zero.astype(bool)])[o],
            np.concatenate([wr, zero.astype(bool)])[o], m0)
