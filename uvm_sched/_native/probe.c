/* Fault probes: a table of ranges moved to the host at given ticks of every iteration, so
 * that their next GPU use faults and CUPTI shows it (Note [Fault probes] in
 * uvm_sched/planner/_faults.py; the Python side builds the table at each warm-up marker).
 * Policy-free like the executor: it carries out the table it is given.
 *
 * Clock: the executor's -- allocator events counted from 0 at the latest marker; a row
 * with tick k is issued right after event k of the iteration has been served, on that
 * event's stream (so after the kernels already queued there, which may have touched the
 * range); tick -1 at the marker itself, on the legacy NULL stream.  A table set in the
 * middle of an iteration fires its tick -1 rows at once and its rows still ahead in this
 * iteration when they come (the runtime sets it just after a marker).  A range no longer
 * inside the pool's reservations (its arena released) is skipped and counted.
 *
 * A row with addr 0 probes the block allocated by allocator event alloc_event of the same
 * iteration (a non-persistent block: its address changes from one iteration to the next):
 * the address is taken at that event, and the row is skipped (counted) where that event was
 * no allocation, or the block is no longer alive at the row's tick at the size given --
 * so a probe never moves memory the block no longer owns.  Every
 * issued probe is recorded in the ring as UVM_EV_PROBE (arg = the row's index in the table
 * given). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static struct {
    uvm_probe_row *rows; /* sorted by tick */
    uint64_t *row_idx;   /* index of each sorted row in the table given */
    uint64_t *at, *ord;  /* of-allocation rows: the block's address and pool ordinal in this
                          * iteration (0: not allocated yet, or the event was no allocation) */
    size_t *rel;         /* the of-allocation rows (sorted-row indices) by alloc_event */
    size_t n, next;      /* next: the first row not yet due in this iteration */
    size_t n_rel, rnext; /* rnext: the first of-allocation row whose event is still ahead */
    uint64_t ev;         /* allocator events since the latest marker */
    uint64_t issued, skipped, failed, bytes;
} P;

typedef struct {
    uvm_probe_row r;
    uint64_t idx;
} keyed;

static int by_tick(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->r.tick != y->r.tick) return (x->r.tick > y->r.tick) - (x->r.tick < y->r.tick);
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static const uvm_probe_row *sort_rows_for_rel; /* by_event's table (lock held) */
static int by_event(const void *a, const void *b) {
    const uvm_probe_row *x = &sort_rows_for_rel[*(const size_t *)a],
                        *y = &sort_rows_for_rel[*(const size_t *)b];
    if (x->alloc_event != y->alloc_event)
        return (x->alloc_event > y->alloc_event) - (x->alloc_event < y->alloc_event);
    return (*(const size_t *)a > *(const size_t *)b) - (*(const size_t *)a < *(const size_t *)b);
}

/* lock held */
static void fire(size_t i, void *stream) {
    const uvm_probe_row *r = &P.rows[i];
    uint64_t addr = r->addr;
    if (addr == 0) { /* of an allocation: still that block, alive, at its size? */
        uvm_block b;
        if (P.at[i] == 0 ||
            uvm_pool_lookup(&uvm_g.pool, (void *)(uintptr_t)P.at[i], &b) != UVM_OK ||
            b.ordinal != P.ord[i] || b.req != r->bytes) {
            P.skipped++;
            return;
        }
        addr = P.at[i];
    }
    void *p = (void *)(uintptr_t)addr;
    if (uvm_pool_check_range(&uvm_g.pool, p, r->bytes) != UVM_OK) {
        P.skipped++;
        return;
    }
    int s = uvm_g.prim->prefetch(r->device, p, r->bytes, 1, stream);
    if (s != UVM_OK) {
        P.failed++;
        uvm_trace(UVM_EV_ACTION_FAILED, addr, r->bytes, (uint64_t)(uintptr_t)stream,
                  r->device, (int64_t)P.row_idx[i]);
        return;
    }
    P.issued++;
    P.bytes += r->bytes;
    uvm_trace(UVM_EV_PROBE, addr, r->bytes, (uint64_t)(uintptr_t)stream, r->device,
              (int64_t)P.row_idx[i]);
}

void uvm_probe_on_mark(void) {
    P.ev = 0;
    P.next = 0;
    P.rnext = 0;
    for (size_t k = 0; k < P.n_rel; k++) P.at[P.rel[k]] = P.ord[P.rel[k]] = 0;
    for (; P.next < P.n && P.rows[P.next].tick < 0; P.next++) fire(P.next, NULL);
}

void uvm_probe_on_event(void *stream, const uvm_block *alloc) {
    /* the of-allocation rows of this event learn their block (before any fires: a row may
     * be due at its own allocation) */
    for (; P.rnext < P.n_rel && (uint64_t)P.rows[P.rel[P.rnext]].alloc_event <= P.ev; P.rnext++) {
        size_t i = P.rel[P.rnext];
        if ((uint64_t)P.rows[i].alloc_event == P.ev && alloc) {
            P.at[i] = (uint64_t)(uintptr_t)alloc->addr;
            P.ord[i] = alloc->ordinal;
        }
    }
    for (; P.next < P.n && (uint64_t)P.rows[P.next].tick <= P.ev; P.next++)
        if ((uint64_t)P.rows[P.next].tick == P.ev) fire(P.next, stream);
    P.ev++;
}

static void drop_table(void) {
    free(P.rows);
    free(P.row_idx);
    free(P.at);
    free(P.ord);
    free(P.rel);
}

void uvm_probe_reset(void) {
    drop_table();
    memset(&P, 0, sizeof P);
}

int uvm_sched_probe_set(const uvm_probe_row *rows, size_t n) {
    if (n && !rows) {
        uvm_set_error("uvm_sched_probe_set: rows is NULL with %zu rows", n);
        return UVM_EINVAL;
    }
    if (n > ((size_t)1 << 24)) {
        uvm_set_error("uvm_sched_probe_set: %zu rows (at most 2^24)", n);
        return UVM_EINVAL;
    }
    size_t n_rel = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].tick < -1 || rows[i].bytes == 0 || rows[i].device < 0) {
            uvm_set_error("probe row %zu: tick %lld (>= -1), bytes %llu (> 0), device %d "
                          "(>= 0)",
                          i, (long long)rows[i].tick, (unsigned long long)rows[i].bytes,
                          rows[i].device);
            return UVM_EINVAL;
        }
        if (rows[i].addr == 0 && (rows[i].alloc_event < 0 || rows[i].tick < rows[i].alloc_event)) {
            uvm_set_error("probe row %zu: addr 0 names the block of allocator event alloc_event "
                          "(%d, >= 0), probed at tick %lld (>= alloc_event: not before it exists)",
                          i, rows[i].alloc_event, (long long)rows[i].tick);
            return UVM_EINVAL;
        }
        n_rel += rows[i].addr == 0;
    }
    keyed *tmp = n ? malloc(n * sizeof *tmp) : NULL;
    uvm_probe_row *copy = n ? malloc(n * sizeof *copy) : NULL;
    uint64_t *idx = n ? malloc(n * sizeof *idx) : NULL;
    uint64_t *at = n ? calloc(n, sizeof *at) : NULL;
    uint64_t *ord = n ? calloc(n, sizeof *ord) : NULL;
    size_t *rel = n_rel ? malloc(n_rel * sizeof *rel) : NULL;
    if (n && (!tmp || !copy || !idx || !at || !ord || (n_rel && !rel))) {
        free(tmp);
        free(copy);
        free(idx);
        free(at);
        free(ord);
        free(rel);
        uvm_set_error("no memory for %zu probe rows", n);
        return UVM_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) tmp[i] = (keyed){rows[i], i};
    if (n) qsort(tmp, n, sizeof *tmp, by_tick);
    for (size_t i = 0, k = 0; i < n; i++) {
        copy[i] = tmp[i].r;
        idx[i] = tmp[i].idx;
        if (copy[i].addr == 0) rel[k++] = i;
    }
    free(tmp);
    pthread_mutex_lock(&uvm_g.lock);
    int s = uvm_g.ready ? UVM_OK : uvm_start_locked();
    if (s != UVM_OK) {
        pthread_mutex_unlock(&uvm_g.lock);
        free(copy);
        free(idx);
        free(at);
        free(ord);
        free(rel);
        return s;
    }
    if (n_rel) {
        sort_rows_for_rel = copy;
        qsort(rel, n_rel, sizeof *rel, by_event);
        sort_rows_for_rel = NULL;
    }
    drop_table();
    P.rows = copy;
    P.row_idx = idx;
    P.at = at;
    P.ord = ord;
    P.rel = rel;
    P.n = n;
    P.n_rel = n_rel;
    /* the iteration under way: the at-marker rows now, the later ticks still to come (an
     * of-allocation row whose allocation is past stays unresolved: skipped this time) */
    P.next = 0;
    for (; P.next < n && P.rows[P.next].tick < 0; P.next++) fire(P.next, NULL);
    while (P.next < n && (uint64_t)P.rows[P.next].tick < P.ev) P.next++;
    P.rnext = 0;
    while (P.rnext < n_rel && (uint64_t)P.rows[rel[P.rnext]].alloc_event < P.ev) P.rnext++;
    pthread_mutex_unlock(&uvm_g.lock);
    return UVM_OK;
}

size_t uvm_sched_probe_stats(uint64_t *out, size_t n) {
    pthread_mutex_lock(&uvm_g.lock);
    uint64_t v[5] = {P.n, P.issued, P.skipped, P.failed, P.bytes};
    pthread_mutex_unlock(&uvm_g.lock);
    if (out) memcpy(out, v, (n < 5 ? n : 5) * sizeof *out);
    return 5;
}
