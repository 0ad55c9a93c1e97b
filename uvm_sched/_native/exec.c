/* The plan executor: policy-free, it carries out a table of actions every iteration.
 *
 * Clock: the allocator events (malloc and free) of the current iteration, counted from 0.
 * An action with tick k is issued right after event k has been served.  An iteration
 * starts at uvm_sched_step() (sync=marker) or every period_events events (sync=period).
 * Blocks: a non-persistent row names allocation j of the current iteration (its address
 * is captured when it happens); a persistent row carries the block's address and its
 * global allocation ordinal, both resolved by the Python side before arming.  An
 * action whose block is not live (not yet allocated, already freed, or its address reused
 * by another allocation: the ordinal tells them apart) is skipped.
 * Divergence: when allocation j of the iteration has a size other than alloc_sizes[j]
 * (0: any size, a position the batch's shapes resize)
 * (or there are more allocations than the plan knows), the rest of the iteration runs
 * without actions and the divergence is counted; the next iteration starts afresh.
 * Ordering: evictions and prefetches go on two side streams (one per copy direction),
 * each made to wait first on an event recorded on the stream of the allocator event that
 * triggered them, so a block never moves before the kernels already queued used it.
 * Advice is not stream-ordered.
 * Discards drop dead data so the driver never copies it back: a discard naming the block
 * that the triggering event has just freed is issued (nothing can have reused it yet; this
 * is where the planner puts them), as is one naming a live block.  It runs on a third side
 * stream (the driver refuses the legacy NULL stream) after the queued compute and after
 * the prefetches queued so far on both copy streams (cuda.h: "any reads, writes or
 * prefetches to any part of the memory range that occur simultaneously with the discard
 * operation result in undefined behavior"), and the compute stream then waits for it, so
 * a later reuse of the address, or a prefetch ordered after compute, cannot race it.  Only
 * blocks that own whole 2 MiB pages (> 1 MiB) are discarded, up to the end of their last
 * page; the pages of a slab are shared by other blocks, so those discards are skipped.
 * Populates: a prefetch to the device of the block that the triggering ALLOC has just
 * handed out goes on the allocating stream itself, not on the copy stream, so no kernel
 * queued after the allocation can touch the block before it.  Its pages may have been
 * discarded (the planner discards at frees and populates at allocations), and a kernel
 * touching discarded pages faults them in at about 0.5 GB/s on an H200 (CUDA 13.0 driver
 * 580; a prefetch of the same pages runs at about 490 GB/s: benchmarks/results/gpu_h200.md),
 * so a populate that waits behind the copy queue's migrations while the kernels race ahead
 * costs seconds per iteration.  Zero-filling resident or discarded pages costs the stream
 * microseconds; a populate of pages left on the host moves them at the link's rate, still
 * faster than the kernel's faults would.  The pages a discard covers are noted in the
 * pool (uvm_pages_discarded), which populates them when it hands them out again, plan or
 * no plan (pool_pages.c: populate_discarded).
 * Re-finding the start (sync=UVM_SYNC_PERIOD_RESYNC): with sync=period a step with a few
 * events fewer or more, or an iteration of another kind (an eval batch), shifts the count
 * for good, and every later iteration would diverge.  In this mode the executor learns the
 * bytes live where its iterations start: the pool's allocated bytes at the last iteration
 * boundary reached by count after a clean iteration.  After a divergence at an allocation
 * it stops counting and seeks, after each allocator event: (1) when the bytes live before
 * that allocation are live again, the events since were inserted into the iteration (an
 * eval batch between the optimizer step and the next step's first frees): it goes on in
 * phase from there, its allocations and actions as before (once per iteration; counted in
 * insertions, a RESUME record); (2) when the start's bytes are live, the next event starts
 * an iteration in phase (counted in resyncs), so only the diverged iteration is lost; when
 * both hold at once, (2), unless the divergence was at the iteration's event 0 (the same
 * point): a step with events missing shows the start's level first.  A level met by chance
 * gives a wrong phase, which diverges and seeks again.  Seeking gives up after two periods
 * of events (a loop that changed shows neither level again) and counts on from there, as
 * sync=period does, so that iterations and their divergences keep coming for the runtime
 * to relearn by.  A divergence found at arming (a live block of another size) counts on,
 * as sync=period; before a start level is known only (1) is sought.
 * Planned insertions (sync=UVM_SYNC_PERIOD_RESYNC): the runtime may give the table of a
 * stretch seen inserted at event `at` of the iteration (an eval batch every k steps,
 * planned from its events: _runtime_insertions.py).  A divergence at an allocation at that
 * event, of the size of the stretch's first allocation, runs that table from there (counted
 * from the allocation as event 0) while seeking as above; its allocations are checked as
 * the iteration's are, and at the first that differs nothing more fires (a wrong guess:
 * the stretch runs unplanned, as without the table).  The stretch counts as planned
 * (insertions_planned; its RESUME record's addr 1) when it resumes having had exactly the
 * table's events and allocations, all matched; any other end counts in
 * insertion_mismatches.
 * Arming mid-iteration (uvm_exec_arm_at, phase k > 0): the executor counts on from event
 * k of the iteration, told the addresses of its allocations already made.
 * Every issued, skipped, failed or unsupported action is also written to the event ring
 * (arg = the row's index in the table given to arm), so a host-backend replay can be
 * compared action by action with the simulator.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pool.h"

void uvm_exec_init(uvm_exec *x, const uvm_prim *prim) {
    memset(x, 0, sizeof *x);
    x->prim = prim;
    x->device = -1;
}

static void free_table(uvm_exec *x) {
    free(x->rows);
    free(x->row_idx);
    free(x->row_start);
    free(x->alloc_sizes);
    free(x->iter_addr);
    free(x->iter_ord);
    x->rows = NULL;
    x->row_idx = x->row_start = x->alloc_sizes = x->iter_addr = x->iter_ord = NULL;
    x->n_rows = x->n_allocs = 0;
}

static void drop_streams(uvm_exec *x);

#define SWAP(a, b)                                                                             \
    do {                                                                                       \
        __typeof__(a) t_ = (a);                                                                \
        (a) = (b);                                                                             \
        (b) = t_;                                                                              \
    } while (0)

/* The inserted stretch's table in place of the iteration's, or back (in_ins). */
static void swap_tables(uvm_exec *x) {
    SWAP(x->rows, x->ins_rows);
    SWAP(x->row_idx, x->ins_row_idx);
    SWAP(x->row_start, x->ins_row_start);
    SWAP(x->alloc_sizes, x->ins_alloc_sizes);
    SWAP(x->iter_addr, x->ins_addr);
    SWAP(x->iter_ord, x->ins_ord);
    SWAP(x->n_rows, x->ins_n_rows);
    SWAP(x->n_allocs, x->ins_n_allocs);
    SWAP(x->period, x->ins_period);
    x->in_ins = !x->in_ins;
}

/* The stretch ended (ok: planned whole); the iteration's table is back. */
static void end_insertion(uvm_exec *x, bool ok) {
    swap_tables(x);
    if (ok)
        x->st.insertions_planned++;
    else
        x->st.insertion_mismatches++;
}

static void free_insertion(uvm_exec *x) {
    if (x->in_ins) swap_tables(x);
    /* the stretch's arrays moved into the iteration's places, freed there by the one
     * function that frees a table, and the (now empty) places swapped back: the iteration's
     * table is untouched and in_ins is false again */
    swap_tables(x);
    free_table(x);
    swap_tables(x);
    x->ins_period = x->ins_at = 0;
}

/* rows sorted by tick into out/idx, start[k] the first of tick k (counting sort, stable:
 * rows of one tick fire in table order); start has period + 1 zeroed entries */
static int sort_rows(const uvm_plan_row *rows, size_t n_rows, uint64_t period,
                     uvm_plan_row *out, uint64_t *idx, uint64_t *start) {
    for (size_t i = 0; i < n_rows; i++) start[rows[i].tick + 1]++;
    for (uint64_t k = 0; k < period; k++) start[k + 1] += start[k];
    uint64_t *fill = calloc(period, sizeof *fill);
    if (!fill) return UVM_ENOMEM;
    for (size_t i = 0; i < n_rows; i++) {
        uint64_t k = (uint64_t)rows[i].tick;
        uint64_t at = start[k] + fill[k]++;
        out[at] = rows[i];
        idx[at] = i;
    }
    free(fill);
    return UVM_OK;
}

void uvm_exec_fini(uvm_exec *x) {
    free_insertion(x);
    free_table(x);
    drop_streams(x);
    const uvm_prim *prim = x->prim;
    uvm_exec_init(x, prim);
}

/* first: the global ordinal of the iteration's allocator event 0 (in the ITER record's
 * addr, so that a drain can tell action ticks within the iteration) */
static void new_iteration(uvm_exec *x, uint64_t first) {
    x->ev_in_iter = 0;
    x->allocs_in_iter = 0;
    x->diverged = false;
    x->waiting = false;
    x->seeking = x->may_resume = x->resumed = false;
    if (x->in_ins) end_insertion(x, false);
    x->iteration++;
    x->st.iterations++;
    uvm_trace(UVM_EV_ITER, first, 0, 0, x->device, (int64_t)x->iteration);
}

static void drop_streams(uvm_exec *x) {
    if (x->h2d) x->prim->stream_destroy(x->h2d);
    if (x->d2h) x->prim->stream_destroy(x->d2h);
    if (x->aux) x->prim->stream_destroy(x->aux);
    if (x->ev) x->prim->event_destroy(x->ev);
    if (x->ev_aux) x->prim->event_destroy(x->ev_aux);
    if (x->ev_copies) x->prim->event_destroy(x->ev_copies);
    x->h2d = x->d2h = x->aux = x->ev = x->ev_aux = x->ev_copies = NULL;
}

static int ensure_streams(uvm_exec *x, int device) {
    if (x->h2d && x->device == device) return UVM_OK;
    drop_streams(x);
    int s = x->prim->stream_create(device, &x->h2d);
    if (s == UVM_OK) s = x->prim->stream_create(device, &x->d2h);
    if (s == UVM_OK) s = x->prim->stream_create(device, &x->aux);
    if (s == UVM_OK) s = x->prim->event_create(device, &x->ev);
    if (s == UVM_OK) s = x->prim->event_create(device, &x->ev_aux);
    if (s == UVM_OK) s = x->prim->event_create(device, &x->ev_copies);
    if (s != UVM_OK) {
        drop_streams(x);
        return s;
    }
    x->device = device;
    return UVM_OK;
}

/* The transitions of sync=UVM_SYNC_PERIOD_RESYNC ("Re-finding the start") are the three
 * functions below.  at_alloc: the divergence is allocator event k = x->ev_in_iter, an
 * allocation of req bytes made now (not one found live at arming): it may be an insertion. */
static void diverge(uvm_exec *x, uint64_t addr, uint64_t req, uint64_t j, bool at_alloc) {
    x->diverged = true;
    x->st.divergences++;
    uvm_trace(UVM_EV_DIVERGENCE, addr, req, 0, x->device, (int64_t)j);
    if (x->sync != UVM_SYNC_PERIOD_RESYNC) return;
    x->may_resume = at_alloc && !x->resumed;
    x->resume_level = uvm_g.pool.st.allocated_bytes - req; /* (before this allocation) */
    x->resume_ev = x->ev_in_iter;
    x->resume_allocs = j;
    x->seeking = x->level_known || x->may_resume;
    /* the planned stretch, where and as it starts (a guess checked allocation by allocation) */
    if (x->may_resume && x->ins_period && x->resume_ev == x->ins_at && x->ins_n_allocs &&
        req == x->ins_alloc_sizes[0]) {
        swap_tables(x);
        x->diverged = false;
    }
}

/* An iteration ended by count (sync=period): a clean one ends where the next starts. */
static void period_edge(uvm_exec *x) {
    if (!x->diverged) {
        x->start_level = uvm_g.pool.st.allocated_bytes;
        x->level_known = true;
    }
}

/* After an allocator event while seeking (ev_in_iter counts it): the iteration goes on at
 * the event where others were inserted, once the bytes live there are live again (once
 * per iteration); or the next one starts in phase, at the learned start's level; or,
 * after two periods of events without either, it starts counting on. */
static void seek(uvm_exec *x) {
    uint64_t level = uvm_g.pool.st.allocated_bytes;
    bool at_start = x->level_known && level == x->start_level;
    /* both levels at once: the start, unless the divergence was at the iteration's event 0
     * (the same point); a step with events missing shows the start's level first */
    if (x->may_resume && level == x->resume_level && (!at_start || x->resume_ev == 0)) {
        uint64_t inserted = x->ev_in_iter - x->resume_ev;
        bool planned = x->in_ins && !x->diverged && inserted == x->period &&
                       x->allocs_in_iter - x->resume_allocs == x->n_allocs;
        if (x->in_ins) end_insertion(x, planned);
        x->ev_in_iter = x->resume_ev;
        x->allocs_in_iter = x->resume_allocs;
        x->diverged = x->seeking = x->may_resume = false;
        x->resumed = true;
        x->st.insertions++;
        uvm_trace(UVM_EV_RESUME, planned, inserted, 0, x->device, (int64_t)x->resume_ev);
        return;
    }
    if (at_start)
        x->st.resyncs++;
    else if (x->ev_in_iter < 2 * (x->in_ins ? x->ins_period : x->period))
        return;
    new_iteration(x, uvm_g.tick + 1); /* starts with the next event */
}

int uvm_exec_arm(uvm_exec *x, const uvm_plan_row *rows, size_t n_rows,
                 const uint64_t *alloc_sizes, size_t n_allocs, uint64_t period, int sync,
                 int device, int start_now) {
    return uvm_exec_arm_at(x, rows, n_rows, alloc_sizes, n_allocs, period, sync, device,
                           start_now, 0, NULL, 0);
}

/* Arming mid-iteration: the current iteration has had `phase` allocator events already; it
 * counts on from event `phase`, and addrs[j] (j < n_addrs) is its allocation j, made before
 * arming (0, or an address no longer live: freed already; rows naming it are skipped).  A
 * live one of the wrong size is a divergence, as if it had happened armed.  Everything is
 * validated before the armed plan is replaced. */
int uvm_exec_arm_at(uvm_exec *x, const uvm_plan_row *rows, size_t n_rows,
                    const uint64_t *alloc_sizes, size_t n_allocs, uint64_t period, int sync,
                    int device, int start_now, uint64_t phase, const uint64_t *addrs,
                    size_t n_addrs) {
    if (period == 0 || period > ((uint64_t)1 << 32)) {
        uvm_set_error("period_events must be in 1..2^32, got %llu", (unsigned long long)period);
        return UVM_EINVAL;
    }
    if (phase >= period) {
        uvm_set_error("phase %llu must be below period_events %llu (it counts the allocator "
                      "events of the iteration already past)",
                      (unsigned long long)phase, (unsigned long long)period);
        return UVM_EINVAL;
    }
    if (phase && !start_now && sync == UVM_SYNC_MARKER) {
        uvm_set_error("phase %llu says the iteration is under way: it needs start_now "
                      "(or sync=period), not waiting for the next marker",
                      (unsigned long long)phase);
        return UVM_EINVAL;
    }
    if (n_addrs > phase || n_addrs > n_allocs || (n_addrs && !addrs)) {
        uvm_set_error("%zu allocations made before arming, but phase is %llu events and the "
                      "plan's iteration has %zu allocations",
                      n_addrs, (unsigned long long)phase, n_allocs);
        return UVM_EINVAL;
    }
    if (sync != UVM_SYNC_MARKER && sync != UVM_SYNC_PERIOD && sync != UVM_SYNC_PERIOD_RESYNC) {
        uvm_set_error("sync must be 0 (marker), 1 (period) or 2 (period, re-finding the start "
                      "after a divergence), got %d", sync);
        return UVM_EINVAL;
    }
    if (device < 0) {
        uvm_set_error("device must be >= 0, got %d", device);
        return UVM_EINVAL;
    }
    for (size_t i = 0; i < n_rows; i++) {
        const uvm_plan_row *r = &rows[i];
        if (r->tick < 0 || (uint64_t)r->tick >= period) {
            uvm_set_error("plan row %zu: tick %lld is outside the iteration (0..%llu)", i,
                          (long long)r->tick, (unsigned long long)period - 1);
            return UVM_EINVAL;
        }
        if (r->action < 0 || r->action >= UVM_ACT_COUNT) {
            uvm_set_error("plan row %zu: unknown action code %d", i, r->action);
            return UVM_EINVAL;
        }
        if (!r->persistent && (r->block < 0 || (uint64_t)r->block >= n_allocs)) {
            uvm_set_error("plan row %zu: block %lld, but the iteration has %zu allocations", i,
                          (long long)r->block, n_allocs);
            return UVM_EINVAL;
        }
    }
    int s = ensure_streams(x, device);
    if (s != UVM_OK) return s;
    /* the start's level is learned anew, but for a plan re-armed in phase after a
     * divergence (the same period: the runtime's resync, _runtime_resync.py) */
    bool keep_level = x->armed && x->level_known && x->sync == UVM_SYNC_PERIOD_RESYNC &&
                      sync == UVM_SYNC_PERIOD_RESYNC && period == x->period;
    uvm_exec_disarm(x);
    x->rows = malloc((n_rows ? n_rows : 1) * sizeof *x->rows);
    x->row_idx = malloc((n_rows ? n_rows : 1) * sizeof *x->row_idx);
    x->row_start = calloc(period + 1, sizeof *x->row_start);
    x->alloc_sizes = malloc((n_allocs ? n_allocs : 1) * sizeof *x->alloc_sizes);
    x->iter_addr = calloc(n_allocs ? n_allocs : 1, sizeof *x->iter_addr);
    x->iter_ord = calloc(n_allocs ? n_allocs : 1, sizeof *x->iter_ord);
    if (!x->rows || !x->row_idx || !x->row_start || !x->alloc_sizes || !x->iter_addr ||
        !x->iter_ord) {
        free_table(x);
        uvm_set_error("out of host memory for a plan of %zu rows", n_rows);
        return UVM_ENOMEM;
    }
    if (sort_rows(rows, n_rows, period, x->rows, x->row_idx, x->row_start) != UVM_OK) {
        free_table(x);
        return UVM_ENOMEM;
    }
    if (n_allocs) memcpy(x->alloc_sizes, alloc_sizes, n_allocs * sizeof *alloc_sizes);
    x->n_rows = n_rows;
    x->n_allocs = n_allocs;
    x->period = period;
    x->sync = sync;
    x->level_known = keep_level;
    x->seeking = false;
    x->armed = true;
    x->iteration = (uint64_t)-1; /* the first iteration started is number 0 */
    x->st.armed = 1;
    x->st.arms++;
    uvm_trace(UVM_EV_ARM, 0, n_rows, 0, device, (int64_t)period);
    if (start_now || phase || sync != UVM_SYNC_MARKER) {
        new_iteration(x, uvm_g.tick >= phase ? uvm_g.tick - phase : 0);
    } else {
        x->waiting = true;
    }
    x->ev_in_iter = phase;
    x->allocs_in_iter = n_addrs;
    for (size_t j = 0; j < n_addrs; j++) {
        uvm_block blk;
        x->iter_addr[j] = x->iter_ord[j] = 0;
        if (!addrs[j] ||
            uvm_pool_lookup(&uvm_g.pool, (void *)(uintptr_t)addrs[j], &blk) != UVM_OK)
            continue;
        if (!x->diverged && x->alloc_sizes[j] && blk.req != x->alloc_sizes[j])
            diverge(x, addrs[j], blk.req, j, false);
        x->iter_addr[j] = addrs[j];
        x->iter_ord[j] = blk.ordinal;
    }
    return UVM_OK;
}

int uvm_exec_set_insertion(uvm_exec *x, const uvm_plan_row *rows, size_t n_rows,
                           const uint64_t *alloc_sizes, size_t n_allocs, uint64_t events,
                           uint64_t at) {
    if (events && (!n_allocs || !alloc_sizes[0])) {
        uvm_set_error("an inserted stretch is found by its first allocation: it needs one, of "
                      "a known size (got %zu allocations)", n_allocs);
        return UVM_EINVAL;
    }
    for (size_t i = 0; i < n_rows; i++) {
        const uvm_plan_row *r = &rows[i];
        if (r->tick < 0 || (uint64_t)r->tick >= events || r->action < 0 ||
            r->action >= UVM_ACT_COUNT ||
            (!r->persistent && (r->block < 0 || (uint64_t)r->block >= n_allocs))) {
            uvm_set_error("inserted stretch row %zu: tick %lld, action %d, block %lld; the "
                          "stretch has %llu events and %zu allocations", i, (long long)r->tick,
                          r->action, (long long)r->block, (unsigned long long)events, n_allocs);
            return UVM_EINVAL;
        }
    }
    free_insertion(x);
    if (!events) return UVM_OK;
    x->ins_rows = malloc((n_rows ? n_rows : 1) * sizeof *x->ins_rows);
    x->ins_row_idx = malloc((n_rows ? n_rows : 1) * sizeof *x->ins_row_idx);
    x->ins_row_start = calloc(events + 1, sizeof *x->ins_row_start);
    x->ins_alloc_sizes = malloc(n_allocs * sizeof *x->ins_alloc_sizes);
    x->ins_addr = calloc(n_allocs, sizeof *x->ins_addr);
    x->ins_ord = calloc(n_allocs, sizeof *x->ins_ord);
    if (!x->ins_rows || !x->ins_row_idx || !x->ins_row_start || !x->ins_alloc_sizes ||
        !x->ins_addr || !x->ins_ord ||
        sort_rows(rows, n_rows, events, x->ins_rows, x->ins_row_idx, x->ins_row_start) !=
            UVM_OK) {
        free_insertion(x);
        uvm_set_error("out of host memory for an inserted stretch of %zu rows", n_rows);
        return UVM_ENOMEM;
    }
    memcpy(x->ins_alloc_sizes, alloc_sizes, n_allocs * sizeof *alloc_sizes);
    x->ins_n_rows = n_rows;
    x->ins_n_allocs = n_allocs;
    x->ins_period = events;
    x->ins_at = at;
    return UVM_OK;
}

void uvm_exec_disarm(uvm_exec *x) {
    if (x->in_ins) end_insertion(x, false);
    if (x->armed) uvm_trace(UVM_EV_DISARM, 0, 0, 0, x->device, (int64_t)x->iteration);
    x->armed = false;
    x->waiting = false;
    x->st.armed = 0;
    free_table(x);
}

/* The block a row names, if it may be acted on (see the header comment). */
static bool resolve(uvm_exec *x, const uvm_plan_row *row, const uvm_block *trig, int trig_kind,
                    void **addr, uvm_block *blk) {
    uint64_t want_ord;
    if (row->persistent) {
        *addr = (void *)(uintptr_t)row->addr;
        want_ord = (uint64_t)row->block;
        if (!*addr) return false;
    } else {
        uint64_t j = (uint64_t)row->block;
        if (j >= x->allocs_in_iter - (x->in_ins ? x->resume_allocs : 0)) return false;
        *addr = (void *)(uintptr_t)x->iter_addr[j];
        want_ord = x->iter_ord[j];
    }
    if (uvm_pool_lookup(&uvm_g.pool, *addr, blk) == UVM_OK) return blk->ordinal == want_ord;
    if (row->action == UVM_ACT_DISCARD && trig_kind == UVM_EV_FREE && trig->addr == *addr &&
        trig->ordinal == want_ord) {
        *blk = *trig; /* just freed by this event: dead data, not yet reusable */
        return true;
    }
    return false;
}

static void fire(uvm_exec *x, uint64_t k, void *stream, const uvm_block *trig, int trig_kind) {
    bool ordered = false, h2d_waits = false, d2h_waits = false, aux_waits = false;
    bool aux_after_copies = false;
    for (uint64_t i = x->row_start[k]; i < x->row_start[k + 1]; i++) {
        const uvm_plan_row *row = &x->rows[i];
        int64_t ri = (int64_t)x->row_idx[i];
        int act = row->action;
        uvm_block blk;
        void *addr = NULL;
        bool ok = resolve(x, row, trig, trig_kind, &addr, &blk) && row->offset < blk.req;
        if (ok && act == UVM_ACT_DISCARD && blk.capacity < UVM_PAGE) ok = false;
        if (!ok) {
            x->st.actions_skipped++;
            uvm_trace(UVM_EV_SKIPPED, (uint64_t)(uintptr_t)addr, row->bytes, 0, x->device, ri);
            continue;
        }
        uint64_t bytes = blk.req - row->offset;
        if (row->bytes && row->bytes < bytes) bytes = row->bytes;
        char *p = (char *)addr + row->offset;
        void *queue = NULL;
        int s = UVM_OK;
        if (act == UVM_ACT_PREFETCH_TO_DEVICE && trig_kind == UVM_EV_ALLOC &&
            !row->persistent && trig->addr == addr) {
            /* a populate: the block this ALLOC has just handed out goes on the allocating
             * stream, ahead of the kernels that will touch it there (header: Populates) */
            queue = stream;
            s = x->prim->prefetch(x->device, p, bytes, false, stream);
            /* an eviction later in this tick must follow it: record again */
            ordered = h2d_waits = d2h_waits = false;
        } else if (act == UVM_ACT_PREFETCH_TO_DEVICE || act == UVM_ACT_PREFETCH_TO_HOST ||
                   act == UVM_ACT_DISCARD) {
            bool *waits;
            if (act == UVM_ACT_PREFETCH_TO_DEVICE) {
                queue = x->h2d;
                waits = &h2d_waits;
            } else if (act == UVM_ACT_PREFETCH_TO_HOST) {
                queue = x->d2h;
                waits = &d2h_waits;
            } else {
                queue = x->aux;
                waits = &aux_waits;
                /* the block's own pages end with it: drop the tail of its last page too */
                if (row->offset + bytes == blk.req) bytes = blk.capacity - row->offset;
            }
            if (!ordered) {
                s = x->prim->event_record(x->ev, stream);
                ordered = s == UVM_OK;
            }
            if (s == UVM_OK && !*waits) {
                s = x->prim->stream_wait_event(queue, x->ev);
                *waits = s == UVM_OK;
            }
            if (s == UVM_OK && act == UVM_ACT_DISCARD && !aux_after_copies) {
                /* after every prefetch queued so far (one event, recorded and waited on
                 * in turn: a wait uses the record made before it) */
                s = x->prim->event_record(x->ev_copies, x->h2d);
                if (s == UVM_OK) s = x->prim->stream_wait_event(queue, x->ev_copies);
                if (s == UVM_OK) s = x->prim->event_record(x->ev_copies, x->d2h);
                if (s == UVM_OK) s = x->prim->stream_wait_event(queue, x->ev_copies);
                aux_after_copies = s == UVM_OK;
            }
            if (s == UVM_OK && act == UVM_ACT_DISCARD) {
                s = x->prim->discard(x->device, p, bytes, queue);
                if (s == UVM_OK) uvm_pages_discarded(&uvm_g.pool, p, bytes);
                if (s == UVM_OK) s = x->prim->event_record(x->ev_aux, queue);
                if (s == UVM_OK) s = x->prim->stream_wait_event(stream, x->ev_aux);
                /* a prefetch later in this tick is ordered after the discard through the
                 * compute stream, which now waits for it: record there again */
                ordered = h2d_waits = d2h_waits = false;
            } else if (s == UVM_OK) {
                s = x->prim->prefetch(x->device, p, bytes, act == UVM_ACT_PREFETCH_TO_HOST, queue);
                if (s == UVM_OK) aux_after_copies = false; /* a discard must wait for it too */
            }
        } else {
            int adv = act == UVM_ACT_ADVISE_PREFERRED_HOST ? UVM_ADV_PREFERRED_HOST
                      : act == UVM_ACT_ADVISE_ACCESSED_BY  ? UVM_ADV_ACCESSED_BY
                                                           : UVM_ADV_READ_MOSTLY;
            s = x->prim->advise(x->device, p, bytes, adv);
        }
        if (s == UVM_OK) {
            x->st.actions_issued++;
            if (act == UVM_ACT_PREFETCH_TO_DEVICE)
                x->st.bytes_h2d += bytes;
            else if (act == UVM_ACT_PREFETCH_TO_HOST)
                x->st.bytes_d2h += bytes;
            else if (act == UVM_ACT_DISCARD)
                x->st.bytes_discarded += bytes;
            else
                x->st.bytes_advised += bytes;
            uvm_trace(UVM_EV_ACTION + act, (uint64_t)(uintptr_t)p, bytes,
                      (uint64_t)(uintptr_t)queue, x->device, ri);
        } else if (s == UVM_EUNSUPPORTED) {
            x->st.actions_unsupported++;
            uvm_trace(UVM_EV_UNSUPPORTED, (uint64_t)(uintptr_t)p, bytes, 0, x->device, ri);
        } else {
            x->st.actions_failed++;
            uvm_trace(UVM_EV_ACTION_FAILED, (uint64_t)(uintptr_t)p, bytes, 0, x->device, ri);
        }
    }
}

void uvm_exec_on_event(uvm_exec *x, int kind, const uvm_block *b, void *stream) {
    if (x->waiting) return;
    uint64_t k = x->ev_in_iter;
    if (kind == UVM_EV_ALLOC) {
        uint64_t j = x->allocs_in_iter++;
        /* in an inserted stretch its own allocations count from its first */
        uint64_t jt = x->in_ins ? j - x->resume_allocs : j;
        if (!x->diverged &&
            (jt >= x->n_allocs || (x->alloc_sizes[jt] && b->req != x->alloc_sizes[jt]))) {
            if (x->in_ins)
                x->diverged = true; /* a wrong guess: the stretch goes on unplanned */
            else
                diverge(x, (uint64_t)(uintptr_t)b->addr, b->req, j, true);
            jt = x->in_ins ? j - x->resume_allocs : j; /* (the stretch may start here) */
        }
        if (!x->diverged) {
            x->iter_addr[jt] = (uint64_t)(uintptr_t)b->addr;
            x->iter_ord[jt] = b->ordinal;
        }
    }
    uint64_t kt = x->in_ins ? k - x->resume_ev : k;
    if (!x->diverged && kt < x->period && x->row_start[kt + 1] > x->row_start[kt])
        fire(x, kt, stream, b, kind);
    x->ev_in_iter = k + 1;
    if (x->seeking) {
        seek(x);
    } else if (x->sync != UVM_SYNC_MARKER && x->ev_in_iter >= x->period) {
        period_edge(x);
        new_iteration(x, uvm_g.tick + 1); /* starts with the next event */
    }
}

void uvm_exec_on_mark(uvm_exec *x) {
    if (x->armed && x->sync == UVM_SYNC_MARKER) new_iteration(x, uvm_g.tick);
}
