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
 * inside the pool's reservations (its arena released) is skipped and counted.  Every
 * issued probe is recorded in the ring as UVM_EV_PROBE (arg = the row's index in the table
 * given). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static struct {
    uvm_probe_row *rows; /* sorted by tick */
    uint64_t *row_idx;   /* index of each sorted row in the table given */
    size_t n, next; /* next: the first row not yet due in this iteration */
    uint64_t ev;    /* allocator events since the latest marker */
    uint64_t issued, skipped, failed, bytes;
} P;

static int by_tick(const void *a, const void *b) {
    const uvm_probe_row *x = a, *y = b;
    return (x->tick > y->tick) - (x->tick < y->tick);
}

/* lock held */
static void fire(size_t i, void *stream) {
    const uvm_probe_row *r = &P.rows[i];
    void *p = (void *)(uintptr_t)r->addr;
    if (uvm_pool_check_range(&uvm_g.pool, p, r->bytes) != UVM_OK) {
        P.skipped++;
        return;
    }
    int s = uvm_g.prim->prefetch(r->device, p, r->bytes, 1, stream);
    if (s != UVM_OK) {
        P.failed++;
        uvm_trace(UVM_EV_ACTION_FAILED, r->addr, r->bytes, (uint64_t)(uintptr_t)stream,
                  r->device, (int64_t)P.row_idx[i]);
        return;
    }
    P.issued++;
    P.bytes += r->bytes;
    uvm_trace(UVM_EV_PROBE, r->addr, r->bytes, (uint64_t)(uintptr_t)stream, r->device,
              (int64_t)P.row_idx[i]);
}

void uvm_probe_on_mark(void) {
    P.ev = 0;
    P.next = 0;
    for (; P.next < P.n && P.rows[P.next].tick < 0; P.next++) fire(P.next, NULL);
}

void uvm_probe_on_event(void *stream) {
    for (; P.next < P.n && (uint64_t)P.rows[P.next].tick <= P.ev; P.next++)
        if ((uint64_t)P.rows[P.next].tick == P.ev) fire(P.next, stream);
    P.ev++;
}

void uvm_probe_reset(void) {
    free(P.rows);
    free(P.row_idx);
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
    for (size_t i = 0; i < n; i++) {
        if (rows[i].tick < -1 || rows[i].bytes == 0 || rows[i].device < 0) {
            uvm_set_error("probe row %zu: tick %lld (>= -1), bytes %llu (> 0), device %d "
                          "(>= 0)",
                          i, (long long)rows[i].tick, (unsigned long long)rows[i].bytes,
                          rows[i].device);
            return UVM_EINVAL;
        }
    }
    uvm_probe_row *copy = n ? malloc(n * sizeof *copy) : NULL;
    uint64_t *idx = n ? malloc(n * sizeof *idx) : NULL;
    if (n && (!copy || !idx)) {
        free(copy);
        free(idx);
        uvm_set_error("no memory for %zu probe rows", n);
        return UVM_ENOMEM;
    }
    if (n) {
        memcpy(copy, rows, n * sizeof *copy);
        for (size_t i = 0; i < n; i++) copy[i].pad = (int32_t)i; /* keep the index */
        qsort(copy, n, sizeof *copy, by_tick);
        for (size_t i = 0; i < n; i++) idx[i] = (uint64_t)copy[i].pad;
    }
    pthread_mutex_lock(&uvm_g.lock);
    int s = uvm_g.ready ? UVM_OK : uvm_start_locked();
    if (s != UVM_OK) {
        pthread_mutex_unlock(&uvm_g.lock);
        free(copy);
        free(idx);
        return s;
    }
    free(P.rows);
    free(P.row_idx);
    P.rows = copy;
    P.row_idx = idx;
    P.n = n;
    /* the iteration under way: the at-marker rows now, the later ticks still to come */
    P.next = 0;
    for (; P.next < n && P.rows[P.next].tick < 0; P.next++) fire(P.next, NULL);
    while (P.next < n && (uint64_t)P.rows[P.next].tick < P.ev) P.next++;
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
