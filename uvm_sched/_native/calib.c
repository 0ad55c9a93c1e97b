/* The calibration probe (uvm_sched_calibrate): what the simulator's hardware profile
 * assumes, measured on the device in a fixed budget, through the driver table only.
 *
 * Note [How the probe makes the device touch managed memory]
 * We ship no kernel, so the device's own accesses come from the driver's memset and copy,
 * which run on the device (the CUDA Programming Guide, "Memcpy()/Memset() Behavior With
 * Managed Memory", paraphrased: for cudaMemset* the data is accessed from the device when
 * it is coherently accessible from the device in the stream, which it always is on devices
 * with concurrent managed access, the only ones the UVM fault path exists on; for a copy
 * of managed memory the source is read as a device pointer).  So:
 * - prefetch bandwidth: cuMemPrefetchAsync of N bytes, timed by events on one stream,
 *   each way; both ways at once on two streams started by one event, each direction sized
 *   by its rate alone so that both streams are busy for the same time (then the bytes of
 *   both over the time of the later one is the link's aggregate, not a tail of one
 *   direction running alone).
 * - fault-batch cost: k 1-byte cuMemsetD8Async on host-resident 2 MiB blocks, one after
 *   the other on a stream: each write faults one page, and the next memset starts only
 *   when the replay is done, so each is one fault batch; minus the same k memsets on
 *   device-resident blocks (the launch cost).  Like kernels.measure's isolated faults,
 *   the figure includes migrating the one small page.
 * - remote access: cuMemcpyDtoDAsync from host-resident data advised PreferredLocation =
 *   host and AccessedBy = the device into device-resident memory.  cuda.h (cuMemAdvise):
 *   AccessedBy "does not cause data migration ... it causes the data to always be mapped in
 *   the specified processor's page tables, as long as the location of the data permits a
 *   mapping to be established"; PreferredLocation: "If the data is already in its preferred
 *   location and the faulting processor can establish a mapping without requiring the data
 *   to be migrated, then data migration will be avoided".  So the copy reads the host's
 *   pages in place over the link, as a kernel under the same advice does.
 * The kit (scripts/gpu_check.py) compares each figure with kernels/measure.py's, which uses
 * kernels of its own: that is the check that these stand-ins measure the same thing.
 *
 * Sizes: an 8 MiB pilot times population, d2h and h2d; the main region N is chosen so that
 * the predicted time of every step is ~70% of the budget left (pilot rates underestimate a
 * fast link, which only shrinks N), and 3N + the pilot stay under half the device's free
 * memory (managed memory is never oversubscribed here). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define MIB ((uint64_t)1 << 20)
#define BLOCK (2 * MIB) /* the driver's VA block */
#define PILOT (8 * MIB)
#define NTIMERS 14
#define FAULT_GUESS_S 100e-6 /* a generous fault batch + launch, to size k to the budget */

typedef struct probe {
    const uvm_prim *p;
    int dev;
    void *s1, *s2;
    void *t[NTIMERS];
    char *pilot, *buf;
    uint64_t buf_bytes;
} probe;

/* v with thousands separators ("{:,}" in Python), into buf (>= 32 bytes) */
static const char *commas(uint64_t v, char *buf) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static uint64_t down(double v) {
    return v < (double)BLOCK ? 0 : (uint64_t)(v / (double)BLOCK) * BLOCK;
}

/* seconds between timers a and b (b waited for first) */
static int span(probe *q, int a, int b, double *out) {
    int s = q->p->event_sync(q->t[b]);
    if (s == UVM_OK) s = q->p->event_sync(q->t[a]);
    if (s == UVM_OK) s = q->p->elapsed_s(q->t[a], q->t[b], out);
    if (s == UVM_OK && !(*out > 0)) {
        uvm_set_error("calibrate: events %d..%d measured %g s: the events do not time the work",
                      a, b, *out);
        s = UVM_EDRIVER;
    }
    return s;
}

#define TRY(expr)                                                                              \
    do {                                                                                       \
        int s_ = (expr);                                                                       \
        if (s_ != UVM_OK) return s_;                                                           \
    } while (0)
#define MARK(i, stream) TRY(q->p->event_record(q->t[i], (stream)))
#define MOVE(ptr, n, to_host, stream) TRY(q->p->prefetch(q->dev, (ptr), (n), (to_host), (stream)))

/* Steps 1-2: pilot rates (population, d2h, h2d) and N. */
static int size_region(probe *q, double budget_s, uvm_calibration *c, uint64_t *n_out,
                       int *k_out) {
    uint64_t room = c->free_bytes / 2 > PILOT ? (c->free_bytes / 2 - PILOT) / 3 : 0;
    if (room < 4 * BLOCK) {
        char f[32], need[32];
        uvm_set_error("calibrate: device %d has %s bytes free; the probe needs %s (three "
                      "regions of at least 8 MiB and an 8 MiB pilot, in at most half of what "
                      "is free)", q->dev, commas(c->free_bytes, f),
                      commas(2 * (12 * BLOCK + PILOT), need));
        return UVM_ENOMEM;
    }
    TRY(q->p->alloc_managed(q->dev, PILOT, (void **)&q->pilot));
    MARK(0, q->s1);
    MOVE(q->pilot, PILOT, 0, q->s1); /* lives nowhere yet: populated on the device */
    MARK(1, q->s1);
    MOVE(q->pilot, PILOT, 1, q->s1);
    MARK(2, q->s1);
    MOVE(q->pilot, PILOT, 0, q->s1);
    MARK(3, q->s1);
    double pop, d2h, h2d, spent;
    TRY(span(q, 0, 1, &pop));
    TRY(span(q, 1, 2, &d2h));
    TRY(span(q, 2, 3, &h2d));
    TRY(span(q, 0, 3, &spent));
    double rp = PILOT / pop, rd = PILOT / d2h, rh = PILOT / h2d;
    double fast = rh > rd ? rh : rd, slow = rh > rd ? rd : rh;
    /* device time per byte of N: populate 3N, d2h 2N, h2d N, duplex (0.75N of the faster
     * way, up to twice as slow shared), remote (<= N/4 at >= a fifth of the slower way) */
    double per_byte = 3 / rp + 2 / rd + 1 / rh + 1.5 / fast + 1.25 / slow;
    int k = (int)(budget_s * 0.1 / (2 * FAULT_GUESS_S));
    *k_out = k < 4 ? 4 : k > 64 ? 64 : k;
    /* fixed costs: the pilot, the fault batches, and the duplex step's floor of one block
     * on the slower way (up to twice as slow shared), which on an asymmetric link is more
     * than its share of N */
    double fixed = spent + 2 * *k_out * FAULT_GUESS_S + 2.0 * BLOCK / slow;
    double left = budget_s - fixed;
    uint64_t n = down(0.7 * (left > 0 ? left : 0) / per_byte);
    if (n > down((double)room)) n = down((double)room);
    if (n < 4 * BLOCK) { /* the smallest whole probe: does it fit, with a margin? */
        n = 4 * BLOCK;
        double need = fixed + n * per_byte;
        /* the estimate's own error (pilot rates, fault guess) needs the same margin the
         * sizing above keeps */
        if (need > 0.8 * budget_s) {
            uvm_set_error("calibrate: a budget of %.0f ms is too small for this device's link "
                          "(pilot: h2d %.2f GB/s, d2h %.2f GB/s); the smallest probe needs "
                          "about %.0f ms", budget_s * 1e3, rh / 1e9, rd / 1e9, need * 1e3);
            return UVM_EINVAL;
        }
    }
    *n_out = n;
    return UVM_OK;
}

/* Steps 3-7 on the region X | Y | Z (N bytes each); see the note at the top. */
static int measure(probe *q, uint64_t n, int k, uvm_calibration *c) {
    q->buf_bytes = 3 * n;
    TRY(q->p->alloc_managed(q->dev, q->buf_bytes, (void **)&q->buf));
    char *x = q->buf, *y = q->buf + n, *z = q->buf + 2 * n;
    double ta, tb, te_h, te_d, t_ref, t_flt, t_rem;
    /* 3. populate all on the device (untimed), then d2h alone (X, Y), h2d alone (X) */
    MOVE(q->buf, q->buf_bytes, 0, q->s1);
    MARK(4, q->s1);
    MOVE(x, 2 * n, 1, q->s1);
    MARK(5, q->s1);
    MOVE(x, n, 0, q->s1);
    MARK(6, q->s1);
    TRY(span(q, 4, 5, &ta));
    TRY(span(q, 5, 6, &tb));
    c->region_bytes = n;
    c->d2h_Bps = 2.0 * n / ta;
    c->h2d_Bps = n / tb;
    /* 4. both ways at once: Y (host) up on s1, Z (device) down on s2, both busy for about
     * the same time: the faster way moves 0.75N */
    double t_both = 0.75 * n / (c->h2d_Bps > c->d2h_Bps ? c->h2d_Bps : c->d2h_Bps);
    uint64_t nh = down(c->h2d_Bps * t_both), nd = down(c->d2h_Bps * t_both);
    if (nh < BLOCK) nh = BLOCK;
    if (nd < BLOCK) nd = BLOCK;
    MARK(7, q->s1);
    TRY(q->p->stream_wait_event(q->s2, q->t[7]));
    MOVE(y, nh, 0, q->s1);
    MOVE(z, nd, 1, q->s2);
    MARK(8, q->s1);
    MARK(9, q->s2);
    TRY(span(q, 7, 8, &te_h));
    TRY(span(q, 7, 9, &te_d));
    c->duplex_h2d_bytes = nh;
    c->duplex_d2h_bytes = nd;
    c->duplex_h2d_Bps = nh / te_h;
    c->duplex_d2h_Bps = nd / te_d;
    c->duplex_Bps = (double)(nh + nd) / (te_h > te_d ? te_h : te_d);
    /* 5. fault batches: 1-byte writes to k blocks of X (resident), then of Y's host-resident
     * tail (nh <= 0.75N leaves at least one block) */
    uint64_t avail = (n - nh) / BLOCK;
    if ((uint64_t)k > avail) k = (int)avail;
    MARK(10, q->s1);
    for (int i = 0; i < k; i++) TRY(q->p->memset_async(q->dev, x + (uint64_t)i * BLOCK, 1, q->s1));
    MARK(11, q->s1);
    for (int i = 0; i < k; i++)
        TRY(q->p->memset_async(q->dev, y + nh + (uint64_t)i * BLOCK, 1, q->s1));
    MARK(12, q->s1);
    TRY(span(q, 10, 11, &t_ref));
    TRY(span(q, 11, 12, &t_flt));
    c->fault_batches = (uint64_t)k;
    c->fault_batch_s = t_flt > t_ref ? (t_flt - t_ref) / k : 0;
    /* 6. remote reads: Z's host-resident head, advised, copied into X on the device */
    uint64_t m = down((double)(n / 4));
    if (m > nd) m = nd;
    TRY(q->p->advise(q->dev, z, m, UVM_ADV_PREFERRED_HOST));
    TRY(q->p->advise(q->dev, z, m, UVM_ADV_ACCESSED_BY));
    MARK(4, q->s1); /* timers 4..6 are read: reuse */
    TRY(q->p->copy_async(q->dev, x, z, m, q->s1));
    MARK(13, q->s1);
    TRY(span(q, 4, 13, &t_rem));
    c->remote_bytes = m;
    c->remote_Bps = m / t_rem;
    /* 7. the probe's device time: the pilot's first event to the last */
    return span(q, 0, 13, &c->device_s);
}

static void probe_free(probe *q) {
    /* cuMemFree waits for the work on the memory: nothing of ours outlives the call */
    if (q->buf) q->p->free_managed(q->buf, q->buf_bytes);
    if (q->pilot) q->p->free_managed(q->pilot, PILOT);
    for (int i = 0; i < NTIMERS; i++)
        if (q->t[i]) q->p->event_destroy(q->t[i]);
    if (q->s2) q->p->stream_destroy(q->s2);
    if (q->s1) q->p->stream_destroy(q->s1);
}

static int run(probe *q, double budget_s, uvm_calibration *c) {
    TRY(q->p->device_name(q->dev, c->device_name, sizeof c->device_name));
    TRY(q->p->mem_info(q->dev, &c->free_bytes, &c->total_bytes));
    TRY(q->p->stream_create(q->dev, &q->s1));
    TRY(q->p->stream_create(q->dev, &q->s2));
    for (int i = 0; i < NTIMERS; i++) TRY(q->p->timer_create(q->dev, &q->t[i]));
    uint64_t n;
    int k;
    TRY(size_region(q, budget_s, c, &n, &k));
    return measure(q, n, k, c);
}

int uvm_sched_calibrate(int device, double budget_s, uvm_calibration *out) {
    if (!out) {
        uvm_set_error("calibrate: out is NULL");
        return UVM_EINVAL;
    }
    memset(out, 0, sizeof *out);
    if (device < 0 || !(budget_s >= 0.02 && budget_s <= 10)) {
        uvm_set_error("calibrate: device %d, budget %g s: the device must be >= 0 and the "
                      "budget 0.02..10 s", device, budget_s);
        return UVM_EINVAL;
    }
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    const uvm_prim *p = uvm_g.prim;
    const char *missing = p->timer_create ? uvm_prim_cuda_missing() : NULL;
    if (!p->timer_create || missing) {
        if (missing)
            uvm_set_error("calibrate: the CUDA driver lacks %s, which the probe needs", missing);
        else
            uvm_set_error("calibrate: the %s backend has no device to measure (%s)", p->name,
                          uvm_g.backend_reason);
        pthread_mutex_unlock(&uvm_g.lock);
        return UVM_EUNSUPPORTED;
    }
    uint64_t t0 = uvm_now_ns();
    probe q = {.p = p, .dev = device};
    int s = run(&q, budget_s, out);
    char why[320];
    snprintf(why, sizeof why, "%s", uvm_sched_last_error());
    probe_free(&q);
    if (s != UVM_OK) uvm_set_error("%s", why); /* the cleanup's calls may have reset it */
    out->wall_s = (double)(uvm_now_ns() - t0) / 1e9;
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}
