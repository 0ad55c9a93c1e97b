"""How often an iteration reads a persistent block, and how often the driver would fault it
back, guessed from allocator events alone.

Oblivious mode prices mapping a persistent block host-resident by the reads that mapping
sends over the link, against leaving its share of the excess to the driver, and it sees no
reads. It sees the gradients: autograd allocates one gradient contribution of a
parameter's size for each use of the parameter in the forward pass, and each use reads the
parameter twice (the forward op, and the backward op that computes its input's gradient).
So the iteration's ALLOCs of exactly a persistent block's size, per persistent block of
that size, count its uses. Blocks of one size cannot be told apart (a weight and its
optimizer moments share it), so each is priced at its group's mean, 1 + 2 x uses (one
read per block in the optimizer step, two per use), never below 2 (a weight used once).
An activation of a weight's size counts as a use too (a U-Net's 3x3 weights and its
feature maps): its reads are then overestimated and it stays on the device where a remote
mapping would have paid (benchmarks/results/robust.md, "reads guessed from the
gradients": the wins this gave up).

Remote, every read crosses the link. Left to the driver, a block is faulted back once per
iteration if its uses are close together -- LRU keeps a block resident while less than the
budget is touched between two of its uses -- and at every use if they are far apart. The
distance between two uses is taken as the bytes the iteration allocates over the stretch
of those ALLOCs, divided by the uses (fresh allocations are touched, so this counts less
than LRU sees: a block is called hot rather than cold when in doubt). A recurrent weight
read at every time step is then hot (its uses one step apart): dearer remote than left to
the driver. A weight used more than once in a stack of layers is cold (its uses layers
apart): faulted at every read, as the driver does. A weight used once shows no distance
and is called hot: one fault-back.
"""
from __future__ import annotations

import numpy as np

__all__ = ["guessed_reads"]

READS_PER_USE = 2  # the forward op and the backward op for its input's gradient
MIN_READS = 2  # a weight used once


def guessed_reads(size, pers, alloc_event, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """``(reads, faults)`` per iteration of each block, guessed (the module docstring) from
    each block's ``size`` (bytes), ``pers`` (persistent) and ``alloc_event`` (its ALLOC in
    the iteration, -1 outside it), at ``budget`` (bytes): the reads a remote mapping sends
    over the link and the fault-backs the driver's LRU would make. ``MIN_READS`` and 0
    (unknown) for a block that is not persistent or whose size no ALLOC has."""
    size, pers = np.asarray(size, np.int64), np.asarray(pers, bool)
    ae = np.asarray(alloc_event, np.int64)
    reads = np.full(len(size), float(MIN_READS))
    faults = np.zeros(len(size), np.int64)
    made = np.flatnonzero((ae >= 0) & ~pers)
    if not pers.any() or not len(made):
        return reads, faults
    made = made[np.argsort(ae[made], kind="stable")]
    allocated = np.cumsum(size[made])  # bytes allocated through each ALLOC, in event order
    made_size = size[made]
    held = np.flatnonzero(pers)
    kinds, group = np.unique(size[held], return_inverse=True)
    members = np.bincount(group, minlength=len(kinds))
    persistent_bytes = float(size[held].sum())
    for k, kind in enumerate(kinds.tolist()):
        at = np.flatnonzero(made_size == kind)
        if not len(at):
            continue
        uses = len(at) / members[k]
        r = max(float(MIN_READS), 1.0 + READS_PER_USE * uses)
        # the stretch's fresh bytes, and its share (by ALLOCs) of the persistent bytes
        share = (at[-1] - at[0]) / len(made)
        between = float(allocated[at[-1]] - allocated[at[0]]) + share * persistent_bytes
        far = between / max(uses, 1.0) > budget
        reads[held[group == k]] = r
        faults[held[group == k]] = int(round(r)) if far else 1
    return reads, faults
