"""The event loop: one compute stream, two copy engines, the UVM driver's residency.

Per tick ``t`` (see ``_model`` for the order of events within a tick):

1. the tick's ALLOCs (pool reuse of resident freed memory, see below), then actions issued
   "after" them (stage ``pre``: ordered after the kernels of ticks ``< t``, so they start no
   earlier than the current time);
2. the kernel: it waits for its chunks still in flight (stall ``link``), demand-faults the
   missing ones (driver eviction of least-recently-migrated chunks if the device is full,
   stall ``eviction``; batched fault servicing, stall ``fault``), reads remote data in place
   (``link``), then computes for the tick's device time;
3. the tick's FREEs, then actions issued after them (stage ``post``: ordered after the
   kernel of tick ``t``, so they start no earlier than its end).

Books: per chunk, ``rb`` bytes resident and ``oh`` bytes whose content lives on the host;
every other byte of a live chunk is fresh (never written) and may be populated on the
device without crossing the link. A byte reaches the device only by a migration that moves
``oh`` bytes over the link, by population of fresh bytes, or by pool reuse (new block).
An eviction adds the bytes it writes back to those already on the host. A zero-copy
access (Note [Advice] in ``_mechanisms``) uses the non-resident bytes in place: reads cross host->device,
writes device->host (both for a read-write access), and the bytes then live on the host.

Copy engines: one per direction, FIFO. Planned prefetches (H2D) and evictions (D2H) queue
on them; so do the fault path's migrations and the driver's write-backs (the link is
shared: a fault whose bytes must cross waits for the copies queued before it, counted as
``link`` stall). The two directions together move at most ``duplex_Bps`` (measured: A100
PCIe4 H2D falls from 25 to 11-13 GB/s while D2H runs): a copy issued while the other
direction is busy gets what its copies leave of that cap until they end, then its own rate
(``copy_end``); copies already queued keep their times (first come, first served), and the
other direction's queued copies are taken to run at the rate of its last one.

Memory is claimed when a transfer into the device is issued and released when a transfer
out completes (a fault that needs room waits for pending releases first, ``eviction``
stall), so the device never holds more than the budget at any instant.

Pool semantics (``pool=True``, our allocator): a FREE does not release device memory; the
freed range stays resident and "dead". A later ALLOC reuses dead resident bytes first, with
no fault (the pool hands out a range that is already mapped); the remainder of the block is
fresh VA, populated on first touch (a fault: latency, no bytes over the link). Dead ranges
left in place age in the driver's LRU and, when evicted, are written back like live data
(the driver cannot know they are dead) -- the cost a caching pool over managed memory pays.
With ``pool=False`` (``cudaMallocManaged``/``cudaFree`` per tensor) a FREE releases at once.
We do not model a reused range that had been evicted to the host (its first touch would
migrate dead bytes back); reuse draws resident dead bytes only, which is optimistic.

Complexity: O(A + E + Q) numpy work over a Python loop of O(T + actions) steps, where T
ticks, A (tick, chunk) accesses, E allocator events, Q chunk migrations (queue entries);
the per-tick constant is ~20 numpy calls. This is the definition; users get ``_fast``'s
compiled twin (same state changes in the same order; ``tests/test_sim_fast.py``), about
20x faster on LLM-shaped traces (``benchmarks/results/scale.md``).

The driver's rules this loop follows (advice, access counters, host calls, the duplex cap)
and what it leaves out are written down in ``_mechanisms``.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..trace import EventKind
from ._mechanisms import COUNTER_MIN_BYTES, copy_end  # noqa: F401 (copy_end: re-exported)
from ._prep import Prepared

_ALLOC = int(EventKind.ALLOC)

# actions the engine executes (a Plan's names, plus the same for baselines)
PREFETCH, EVICT, PREF_HOST, ACCESSED_BY, READ_MOSTLY, DISCARD = range(6)


class Engine:
    """State of one simulation run. ``actions(t, stage)`` supplies (action, block, lo, hi)
    tuples (``block`` dense; ``lo``/``hi`` byte range) issued at tick ``t``."""

    def __init__(self, prep: Prepared, hw, budget: int, *, pool: bool = True,
                 zero_fill_faults: bool = True, record_from: int = 0) -> None:
        self.zero_fill_faults = zero_fill_faults
        self.p = prep
        self.hw = hw
        self.B = int(budget)
        self.pool = pool
        nc = len(prep.csize)
        nb = len(prep.bsize)
        self.rb = np.zeros(nc, np.int64)  # resident (or claimed in-flight) bytes
        self.oh = np.zeros(nc, np.int64)  # bytes whose content lives on the host
        self.ready = np.zeros(nc)  # time an inbound copy completes
        self.hold = np.zeros(nc)  # time an outbound copy completes
        self.alive = np.zeros(nc, np.int8)  # 0 unallocated, 1 live, 2 freed
        self.dirty = np.zeros(nc, bool)
        self.stamp = np.full(nc, -1, np.int64)
        self.pinned = np.zeros(nc, bool)
        self.rmostly = np.zeros(nb, bool)
        self.pref_host = np.zeros(nb, bool)
        self.acc_by = np.zeros(nb, bool)
        self.mapped = np.zeros(nc, bool)  # the GPU maps the chunk's host pages (Note [Advice])
        self.any_remote = False
        self.any_rmostly = False
        # LRU queue (lazy deletion: an entry is valid while its stamp matches the chunk's)
        self.q = np.zeros(max(1024, 2 * nc), np.int64)
        self.qs = np.zeros(len(self.q), np.int64)
        self.qh = self.qn = 0
        self.dq = np.zeros(max(1024, nc), np.int64)  # freed-chunk FIFO (pool reuse)
        self.dqs = np.zeros(len(self.dq), np.int64)
        self.dh = self.dn = 0
        self.seq = 0
        self.claimed = 0  # bytes of device memory held (resident + in flight + pending out)
        self.dead_res = 0
        self.pending: list[tuple[float, int]] = []  # (time, bytes) outbound releases
        self.now = 0.0
        self.host = 0.0  # the host's clock of prefetch/advise calls (Note [Host calls])
        self.h2d_free = 0.0
        self.d2h_free = 0.0
        self.h2d_rate = 0.0  # bytes/s of the last copy queued each way (its tail rate)
        self.d2h_rate = 0.0
        self.record_from = record_from
        self.recording = False
        self.peak = 0
        # per-window counters
        self.bytes_h2d = 0
        self.bytes_d2h = 0
        self.faults = 0
        self.transfers: list[tuple] = []
        # ledger for the conservation check (bytes, whole run)
        self.led = dict.fromkeys(
            ("populated", "migrated_in", "reused_in", "evicted_out", "discarded",
             "freed", "reused_out", "dropped_dup", "remote_in", "remote_out"), 0)
        # per tick of the window
        self.tick_h2d = 0
        self.tick_d2h = 0

    # -- bookkeeping ------------------------------------------------------------------
    def _push(self, chunks: np.ndarray) -> None:
        n = len(chunks)
        if not n:
            return
        st = np.arange(self.seq, self.seq + n, dtype=np.int64)
        self.seq += n
        self.stamp[chunks] = st
        if self.qn + n > len(self.q):
            self._compact_q(n)
        self.q[self.qn:self.qn + n] = chunks
        self.qs[self.qn:self.qn + n] = st
        self.qn += n

    def _compact_q(self, extra: int) -> None:
        c = self.q[self.qh:self.qn]
        s = self.qs[self.qh:self.qn]
        keep = self.stamp[c] == s
        c, s = c[keep], s[keep]
        size = len(self.q)
        while len(c) + extra > size // 2:
            size *= 2
        q = np.zeros(size, np.int64)
        qs = np.zeros(size, np.int64)
        q[:len(c)] = c
        qs[:len(c)] = s
        self.q, self.qs, self.qh, self.qn = q, qs, 0, len(c)

    def _push_dead(self, chunks: np.ndarray) -> None:
        n = len(chunks)
        if not n:
            return
        if self.dn + n > len(self.dq):
            c = self.dq[self.dh:self.dn]
            s = self.dqs[self.dh:self.dn]
            keep = (self.stamp[c] == s) & (self.alive[c] == 2)
            c, s = c[keep], s[keep]
            size = len(self.dq)
            while len(c) + n > size // 2:
                size *= 2
            self.dq = np.zeros(size, np.int64)
            self.dqs = np.zeros(size, np.int64)
            self.dq[:len(c)] = c
            self.dqs[:len(c)] = s
            self.dh, self.dn = 0, len(c)
        self.dq[self.dn:self.dn + n] = chunks
        self.dqs[self.dn:self.dn + n] = self.stamp[chunks]
        self.dn += n

    def _claim(self, n: int) -> None:
        self.claimed += n
        if self.claimed > self.peak:
            self.peak = self.claimed

    def _retire(self, t: float) -> None:
        while self.pending and self.pending[0][0] <= t:
            _, b = heapq.heappop(self.pending)
            self.claimed -= b

    def _xfer(self, direction: str, start: float, nbytes: int, bw: float, cause: str,
              block: int, extra_s: float = 0.0) -> float:
        """Queue a copy on the engine of ``direction`` no earlier than ``start``; returns
        its end time."""
        cap = self.hw.duplex_Bps
        if direction == "h2d":
            s = max(start, self.h2d_free)
            e = copy_end(s, nbytes, bw, self.d2h_free, self.d2h_rate, cap) + extra_s
            self.h2d_free, self.h2d_rate = e, bw
        else:
            s = max(start, self.d2h_free)
            e = copy_end(s, nbytes, bw, self.h2d_free, self.h2d_rate, cap) + extra_s
            self.d2h_free, self.d2h_rate = e, bw
        if self.recording and nbytes > 0:
            if direction == "h2d":
                self.bytes_h2d += nbytes
                self.tick_h2d += nbytes
            else:
                self.bytes_d2h += nbytes
                self.tick_d2h += nbytes
            self.transfers.append((s, e, direction, int(nbytes), block, cause))
        return e

    # -- eviction -----------------------------------------------------------------------
    def _take_lru(self, need: int, pin: np.ndarray) -> np.ndarray:
        """Chunks (oldest migration first) holding at least ``need`` bytes, excluding
        pinned ones; they are removed from the device bookkeeping by the caller."""
        out = []
        got = 0
        pos = self.qh
        W = 256
        while got < need and pos < self.qn:
            end = min(pos + W, self.qn)
            c = self.q[pos:end]
            s = self.qs[pos:end]
            cand = (self.stamp[c] == s) & (self.rb[c] > 0) & ~pin[c]
            sz = np.where(cand, self.rb[c], 0)
            cs = np.cumsum(sz)
            k = int(np.searchsorted(cs, need - got))
            if k < len(cs):
                sel = c[:k + 1][cand[:k + 1]]
                got += int(cs[k])
                out.append(sel)
                self.stamp[sel] = -1
                pos = pos + k + 1
                break
            sel = c[cand]
            got += int(cs[-1]) if len(cs) else 0
            out.append(sel)
            self.stamp[sel] = -1
            pos = end
            W = min(W * 4, 1 << 20)
        # advance the head over entries no longer valid
        h = self.qh
        while h < pos:
            end = min(h + 4096, pos)
            c = self.q[h:end]
            valid = self.stamp[c] == self.qs[h:end]
            idx = np.flatnonzero(valid)
            if len(idx):
                h += int(idx[0])
                break
            h = end
        self.qh = h
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def _evict_chunks(self, ch: np.ndarray, start: float, bw: float, cause: str,
                      block: int = -1) -> tuple[float, int]:
        """Move ``ch`` off the device from ``start``: live (and dead, the driver cannot
        tell) data is written back unless it is a clean read-mostly duplicate. Returns (end
        time of the write-back, bytes written)."""
        if not len(ch):
            return start, 0
        rb = self.rb[ch]
        dup = self.rmostly[self.p.cblock[ch]] & ~self.dirty[ch] & (self.oh[ch] >= rb)
        dead = self.alive[ch] == 2
        wb = int(rb[~dup].sum())
        total = int(rb.sum())
        self.led["evicted_out"] += wb
        self.led["dropped_dup"] += total - wb
        if dead.any():
            self.dead_res -= int(rb[dead].sum())
        # a write-back cannot start before an inbound copy of the same chunk has landed
        st = max(start, float(self.ready[ch].max()))
        end = self._xfer("d2h", st, wb, bw, cause, block) if wb else st
        # the bytes written back join those already on the host (a chunk partly faulted in
        # keeps its other bytes there); a dropped duplicate's host copy stays as it is
        wbk = ch[~dead & ~dup]
        self.oh[wbk] = np.minimum(self.p.csize[wbk], self.oh[wbk] + self.rb[wbk])
        self.oh[ch[dead]] = 0
        self.rb[ch] = 0
        self.stamp[ch] = -1
        self.hold[ch] = end
        self.dirty[ch] = False
        self.mapped[ch] = False  # the pages moved: a mapping of their old place is gone
        # the memory is free once the copy has landed (a dropped duplicate: at once)
        heapq.heappush(self.pending, (end, total))
        return end, wb

    def _duplicate_to_host(self, ch: np.ndarray, start: float, block: int) -> None:
        """A planned eviction of a read-mostly block (Note [Read-mostly prefetch to the
        host]): the host gets a read-only copy of what it lacks, over the device->host
        engine; the device copy stays resident and its memory stays claimed."""
        if not len(ch):
            return
        rb = self.rb[ch]
        copy = self.dirty[ch] | (self.oh[ch] < rb)
        wb = int(rb[copy].sum())
        if not wb:
            return
        st = max(start, float(self.ready[ch].max()))
        self._xfer("d2h", st, wb, self.hw.d2h_prefetch_Bps, "plan", block)
        c = ch[copy]
        self.oh[c] = np.minimum(self.p.csize[c], self.oh[c] + self.rb[c])
        self.dirty[c] = False  # both copies are valid until the next write collapses them

    def _make_room(self, need: int, at: float, pin: np.ndarray, cause: str,
                   trim: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """Ensure ``need`` more bytes fit under the budget from time ``at``: wait for pending
        releases, then evict least-recently-migrated chunks, then (``trim`` = the faulting
        kernel's chunks and the bytes it needs of each) write back the pages of its own
        chunks it does not touch. Returns the time room exists."""
        self._retire(at)
        t = at
        deficit = self.claimed + need - self.B
        if deficit <= 0:
            return t
        # pending releases first (they are already on their way out)
        pend_total = sum(b for _, b in self.pending)
        if pend_total >= deficit:
            while self.claimed + need > self.B:
                e, b = heapq.heappop(self.pending)
                self.claimed -= b
                t = max(t, e)
            return t
        ch = self._take_lru(deficit - pend_total, pin)
        end, _ = self._evict_chunks(ch, t, self.hw.d2h_evict_Bps, "evict")
        short = self.claimed - sum(b for _, b in self.pending) + need - self.B
        if short > 0 and trim is not None:
            end = max(end, self._trim(trim[0], trim[1], short, t))
        # the fault path waits for the write-back (and any pending release) to finish
        while self.pending and self.claimed + need > self.B:
            e, b = heapq.heappop(self.pending)
            self.claimed -= b
            t = max(t, e)
        if self.claimed + need > self.B:
            raise RuntimeError(
                f"simulator invariant broken: need {need:,} bytes with {self.claimed:,} held "
                f"of a {self.B:,} byte budget and nothing left to evict")
        return max(t, end)

    def _trim(self, cc: np.ndarray, nd: np.ndarray, short: int, t: float) -> float:
        """Write back ``short`` bytes (or all there are) of the pages of chunks ``cc`` beyond
        the ``nd`` bytes the kernel needs of each -- the last resort when a kernel's own
        chunks, pinned while it faults, hold more than it touches (a whole small block
        prefetched, a partial access). Returns the end time of the write-back."""
        ex = self.rb[cc] - nd
        sel = ex > 0
        cc, ex = cc[sel], ex[sel]
        if not len(cc):
            return t
        k = int(np.searchsorted(np.cumsum(ex), short))
        cc, ex = cc[:k + 1], ex[:k + 1]
        tot = int(ex.sum())
        dead = self.alive[cc] == 2
        if dead.any():
            self.dead_res -= int(ex[dead].sum())
        self.led["evicted_out"] += tot
        st = max(t, float(self.ready[cc].max()))
        end = self._xfer("d2h", st, tot, self.hw.d2h_evict_Bps, "evict", -1)
        self.rb[cc] -= ex
        live = cc[~dead]
        self.oh[live] = np.minimum(self.p.csize[live], self.oh[live] + ex[~dead])
        self.hold[cc] = np.maximum(self.hold[cc], end)
        self.mapped[cc] = False
        heapq.heappush(self.pending, (end, tot))
        return end

    # -- allocator events ---------------------------------------------------------------
    def alloc(self, blocks: np.ndarray) -> None:
        p = self.p
        for b in blocks.tolist():
            c0, n = int(p.bchunk0[b]), int(p.bnchunk[b])
            ch = np.arange(c0, c0 + n)
            self.alive[ch] = 1
            self.rb[ch] = 0
            self.oh[ch] = 0
            self.dirty[ch] = False
            if not self.pool or self.dead_res <= 0:
                continue
            want = min(int(p.bsize[b]), self.dead_res)
            if want <= 0:
                continue
            got = 0
            taken = []
            while got < want and self.dh < self.dn:
                end = min(self.dh + 4096, self.dn)
                c = self.dq[self.dh:end]
                ok = (self.stamp[c] == self.dqs[self.dh:end]) & (self.alive[c] == 2) & (self.rb[c] > 0)
                sz = np.where(ok, self.rb[c], 0)
                cs = np.cumsum(sz)
                k = int(np.searchsorted(cs, want - got))
                if k < len(cs):
                    sel = c[:k + 1][ok[:k + 1]]
                    got += int(cs[k])
                    taken.append(sel)
                    self.dh += k + 1
                    break
                taken.append(c[ok])
                got += int(cs[-1]) if len(cs) else 0
                self.dh = end
            if not taken:
                continue
            tk = np.concatenate(taken)
            use = min(got, want)
            over = got - use
            if over > 0:
                # the last range taken is split: its tail stays a free, resident pool range
                last = int(tk[-1])
                tk = tk[:-1]
                self.rb[last] = over
                self.dh -= 1  # still at the head of the freed FIFO (same stamp: valid)
            self.rb[tk] = 0
            self.stamp[tk] = -1
            self.dead_res -= use
            self.led["reused_out"] += use
            # the new block's leading bytes land in the reused (resident) range
            cs = p.csize[ch]
            fill = np.clip(use - (np.cumsum(cs) - cs), 0, cs)
            self.rb[ch] = fill
            self.led["reused_in"] += use
            self._push(ch[fill > 0])

    def free(self, blocks: np.ndarray) -> None:
        p = self.p
        for b in blocks.tolist():
            c0, n = int(p.bchunk0[b]), int(p.bnchunk[b])
            ch = np.arange(c0, c0 + n)
            self.alive[ch] = 2
            self.oh[ch] = 0
            res = ch[self.rb[ch] > 0]
            if not len(res):
                continue
            if self.pool:
                self.dead_res += int(self.rb[res].sum())
                self._push_dead(res)
            else:
                tot = int(self.rb[res].sum())
                self.led["freed"] += tot
                self.claimed -= tot
                self.rb[res] = 0
                self.stamp[res] = -1

    # -- planned actions ---------------------------------------------------------------
    def act(self, action: int, b: int, lo: int, hi: int, at: float, pin: np.ndarray) -> None:
        p = self.p
        if action == PREF_HOST:
            self.pref_host[b] = True
            self.any_remote = True
            return
        if action == ACCESSED_BY:
            self.acc_by[b] = True
            self.any_remote = True
            return
        if action == READ_MOSTLY:
            self.rmostly[b] = True
            self.any_rmostly = True
            return
        V = self.hw.va_block_bytes
        c0, n = int(p.bchunk0[b]), int(p.bnchunk[b])
        size = int(p.bsize[b])
        lo = max(0, lo)
        hi = size if hi < 0 else min(hi, size)
        a = c0 + lo // V
        z = max(a + 1, c0 + -(-hi // V))
        z = min(z, c0 + n)
        ch = np.arange(a, z)
        if action == DISCARD:
            ch = ch[self.rb[ch] > 0]
            self.oh[np.arange(a, z)] = 0
            if len(ch):
                tot = int(self.rb[ch].sum())
                dead = self.alive[ch] == 2
                if dead.any():
                    self.dead_res -= int(self.rb[ch[dead]].sum())
                self.led["discarded"] += tot
                self.claimed -= tot
                self.rb[ch] = 0
                self.dirty[ch] = False
                self.stamp[ch] = -1
            return
        if action == EVICT:
            ch = ch[self.rb[ch] > 0]
            if self.rmostly[b]:
                self._duplicate_to_host(ch, at, b)
            else:
                self._evict_chunks(ch, at, self.hw.d2h_prefetch_Bps, "plan", b)
            return
        if action == PREFETCH:
            self._bring_in(ch, at, pin, self.hw.h2d_prefetch_Bps, "plan", b)
            return
        raise ValueError(f"unknown action code {action}")

    def _bring_in(self, ch: np.ndarray, at: float, pin: np.ndarray, bw: float, cause: str,
                  block: int) -> None:
        """Make chunks ``ch`` wholly resident from ``at`` (those that fit the budget): room is
        made, their host bytes cross at ``bw``, fresh ones are populated. The kernel does
        not wait; the chunks are ready when the copy lands. "By default, any mappings to the
        previous location of the migrated pages are removed" (CUDA Runtime API,
        cudaMemPrefetchAsync)."""
        p = self.p
        miss = p.csize[ch] - self.rb[ch]
        ch = ch[miss > 0]
        if not len(ch):
            return
        miss = p.csize[ch] - self.rb[ch]
        if int(miss.sum()) + int(self.rb[ch].sum()) > self.B:
            # more than the whole budget: the driver can hold only what fits, so the
            # migration moves the leading chunks that do
            fit = np.cumsum(miss) + int(self.rb[ch].sum()) <= self.B
            ch, miss = ch[fit], miss[fit]
            if not len(ch):
                return
        need = int(miss.sum())
        pin[ch] = True
        t = self._make_room(need, at, pin, "evict")
        pin[ch] = False
        self._claim(need)
        xb = int(np.minimum(miss, self.oh[ch]).sum())
        self.led["migrated_in"] += xb
        self.led["populated"] += need - xb
        t = max(t, float(self.hold[ch].max()))
        end = self._xfer("h2d", t, xb, bw, cause, block) if xb else t
        self.rb[ch] = p.csize[ch]
        keep = self.rmostly[p.cblock[ch]]
        self.oh[ch] = np.where(keep, self.oh[ch], 0)
        self.ready[ch] = end
        self.mapped[ch] = False
        self._push(ch)

    # -- the kernel of one tick ---------------------------------------------------------
    def _remote(self, rc: np.ndarray, rn: np.ndarray, rw: np.ndarray, rr: np.ndarray,
                now: float) -> tuple[float, float, float, np.ndarray]:
        """Access of chunks ``rc`` (needing ``rn`` bytes each) in place on the host, from the
        kernel starting at ``now`` (Note [Advice]): a chunk with ``PreferredLocation = CPU``
        and no mapping faults once (one fault-batch latency per batch of its bytes) and is
        mapped; reads then cross host->device at ``hw.remote_read_Bps``, writes
        device->host at ``hw.remote_write_Bps`` (a write does not read; a read-write access
        crosses both ways), each on its own copy engine; the bytes then live on the host (a
        first touch of fresh pages populates them there), so a later migration moves them.
        Returns (fault stall s, link stall s, time the accesses are done, the chunks whose
        access counters fire: read through an ``AccessedBy`` mapping alone, on a profile
        with ``access_counter_migration``)."""
        t0 = now
        # data still on its way in or out lands before the kernel uses it
        now = max(now, float(self.ready[rc].max()), float(self.hold[rc].max()))
        far = rn - self.rb[rc]
        blk = self.p.cblock[rc]
        ph = self.pref_host[blk]
        ab = self.acc_by[blk]
        # PreferredLocation alone: the first access faults and the driver maps the pages
        unm = ph & ~ab & ~self.mapped[rc]
        batches = int((-(-far[unm] // self.hw.fault_batch_bytes)).sum())
        lat = batches * self.hw.fault_batch_latency_s
        if self.recording:
            self.faults += batches
        self.mapped[rc[ph]] = True
        now += lat
        rbytes = int(far[rr].sum())
        wbytes = int(far[rw].sum())
        end = now
        if rbytes:
            end = max(end, self._xfer("h2d", now, rbytes, self.hw.remote_read_Bps, "remote", -1))
        if wbytes:
            end = max(end, self._xfer("d2h", now, wbytes, self.hw.remote_write_Bps, "remote",
                                      -1))
        self.led["remote_in"] += rbytes
        self.led["remote_out"] += wbytes
        self.oh[rc] = np.maximum(self.oh[rc], far)
        w = rc[rw]
        self.dirty[w] |= self.rb[w] > 0  # the resident part was written too
        mig = rc[ab & ~ph & (far >= COUNTER_MIN_BYTES)] if self.hw.access_counter_migration \
            else rc[:0]
        return lat, end - t0 - lat, end, mig

    def kernel(self, t: int) -> tuple[float, float, float]:
        """Run tick ``t``'s kernel's memory accesses; returns (fault, evict, link) stall s."""
        p = self.p
        s, e = p.acc_ptr[t], p.acc_ptr[t + 1]
        if s == e:
            return 0.0, 0.0, 0.0
        cc = p.acc_chunk[s:e]
        nd = p.acc_need[s:e]
        wr = p.acc_write[s:e]
        rd = p.acc_read[s:e]
        hw = self.hw
        t0 = self.now
        now = t0
        st_link = st_fault = st_evict = 0.0
        mig = cc[:0]
        if self.any_remote:
            blk = p.cblock[cc]
            rbc = self.rb[cc]
            # in place: under PreferredLocation = CPU; under AccessedBy alone, a chunk whose
            # missing bytes all live on the host (fresh pages have no place to map yet)
            rem = (self.pref_host[blk] | (self.acc_by[blk] & (self.oh[cc] >= nd - rbc))) & (
                rbc < nd) & ~self.rmostly[blk]
            if rem.any():
                sf_, sl_, now, mig = self._remote(cc[rem], nd[rem], wr[rem], rd[rem], now)
                st_fault += sf_
                st_link += sl_
                keepm = ~rem
                cc, nd, wr = cc[keepm], nd[keepm], wr[keepm]
        # data in flight to the device: the kernel waits for it
        if len(cc):
            r = float(self.ready[cc].max())
            if r > now:
                st_link += r - now
                now = r
        rb = self.rb[cc]
        m = rb < nd
        if m.any():
            fc = cc[m]
            # data on its way out must land on the host before it can come back
            h = float(self.hold[fc].max())
            if h > now:
                st_link += h - now
                now = h
            cs = p.csize[fc]
            new = nd[m].copy()
            old = rb[m]
            new = np.maximum(new, old)
            # tree prefetcher: a VA block whose residency passes 51% is completed
            done = new * 100 > cs * 51
            full = new.copy()
            full[done] = cs[done]
            # (the prefetcher completes a VA block only where the device has room for it
            # beside the kernel's own chunks)
            if int((full - old).sum()) <= self.B - int(self.rb[cc].sum()):
                new = full
            grow = new - old
            need = int(grow.sum())
            self.pinned[cc] = True
            t_room = self._make_room(need, now, self.pinned, "evict", (cc, nd))
            self.pinned[cc] = False
            if t_room > now:
                st_evict += t_room - now
                now = t_room
            self._claim(need)
            xb = np.minimum(grow, self.oh[fc])
            xbytes = int(xb.sum())
            if self.zero_fill_faults:
                batches = int((-(-grow // hw.fault_batch_bytes)).sum())
            else:  # populating fresh pages is free: only migrations are serviced as faults
                batches = int((-(-xb // hw.fault_batch_bytes)).sum())
            lat = batches * hw.fault_batch_latency_s
            if xbytes:
                s0 = max(now, self.h2d_free)
                if s0 > now:
                    st_link += s0 - now
                end = self._xfer("h2d", now, xbytes, hw.h2d_fault_Bps, "fault", -1, lat)
                st_fault += end - s0
                now = end
            else:
                st_fault += lat
                now += lat
            self.led["migrated_in"] += xbytes
            self.led["populated"] += need - xbytes
            if self.recording:
                self.faults += batches
            self.rb[fc] = new
            if self.any_rmostly:
                dup = self.rmostly[p.cblock[fc]]
                self.oh[fc] = np.where(dup, self.oh[fc], self.oh[fc] - xb)
            else:
                self.oh[fc] -= xb
            self.ready[fc] = now
            self._push(fc)
        if wr.any():
            w = cc[wr]
            self.dirty[w] = True
            if self.any_rmostly:
                # a write collapses read-mostly duplicates: the host copy of the resident
                # bytes is stale, that of the others (not resident) is their only copy
                w = w[self.rmostly[p.cblock[w]]]
                self.oh[w] = np.minimum(self.oh[w], p.csize[w] - self.rb[w])
        if len(mig):
            # the driver services the counters' notifications after the kernel's accesses,
            # migrating as the fault path does; the kernel does not wait for it
            self._bring_in(mig, now, self.pinned, hw.h2d_fault_Bps, "counter", -1)
        self.now = now
        return st_fault, st_evict, st_link


__all__ = ["Engine", "copy_end", "PREFETCH", "EVICT", "PREF_HOST", "ACCESSED_BY", "READ_MOSTLY",
           "DISCARD"]
