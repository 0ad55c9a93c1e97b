/* The fake driver's clock (included by fake_cuda.c, its only user): a deterministic time
 * model so that code that times the device with CUDA events (uvm_sched's calibration
 * probe) is tested for its logic and arithmetic on a machine without a GPU.
 *
 * Nothing runs: every stream-ordered call advances its stream's clock (ns, double) by
 * what the call would cost at configured rates, starting when the stream's earlier work is
 * done and not before the host issued it (the host's clock moves only when it waits:
 * cuEventSynchronize, cuEventQuery, cuCtxSynchronize).  An event records its stream's
 * clock; cuStreamWaitEvent moves the waiting stream's clock up to the event's;
 * cuEventElapsedTime is the difference, in ms.  Rates, read at every cuInit (GB/s =
 * bytes per ns): FAKE_CUDA_H2D_GBPS (25), FAKE_CUDA_D2H_GBPS (20), FAKE_CUDA_DUPLEX_GBPS
 * (30: the link's aggregate when both directions run), FAKE_CUDA_REMOTE_GBPS (12: the
 * device reading or writing host-resident data in place), FAKE_CUDA_FAULT_US (40: one
 * fault batch), FAKE_CUDA_FAULT_GBPS (8: migration on the fault path),
 * FAKE_CUDA_POPULATE_GBPS (200: first touch of a page that lives nowhere yet),
 * FAKE_CUDA_HBM_GBPS (2000: device-local bytes), FAKE_CUDA_LAUNCH_US (4: every
 * stream-ordered call); FAKE_CUDA_TOTAL_BYTES (80 GiB) and FAKE_CUDA_FREE_BYTES (64 GiB)
 * for cuMemGetInfo.
 *
 * Residency: each 4 KiB page of managed memory is nowhere (never touched), on the host or
 * on the device, with the advice set on it.  cuMemPrefetchAsync moves pages over the link
 * (bytes / the direction's rate; pages that live nowhere are populated at the destination).
 * A device access (cuMemsetD8Async, cuMemcpyDtoDAsync) of a host-resident page migrates it
 * to the device, one fault batch per 256 faulting pages, unless the page is mapped for the
 * device: AccessedBy ("the data to always be mapped in the specified processor's page
 * tables", cuda.h cuMemAdvise), or PreferredLocation = host after its first fault ("If
 * the data is already in its preferred location and the faulting processor can establish
 * a mapping without requiring the data to be migrated, then data migration will be
 * avoided"), in which case its bytes go over the link in place at the remote rate.
 *
 * Duplex: a prefetch that starts while a prefetch the other way is moving on another
 * stream shares the link with it: while both move, each runs at its rate times
 * min(1, DUPLEX / (h2d + d2h)); the one left runs alone at its full rate.  Only the latest
 * transfer of each stream is paired, and only while nothing was queued after it. */

#define PAGE_SHIFT 12
#define PG_LOC 3       /* 0 nowhere, 1 host, 2 device */
#define PG_PREF_HOST 4 /* advice: preferred location host */
#define PG_ACCESSED 8  /* advice: accessed by the device */
#define PG_MAPPED 16   /* host page mapped for the device after a fault (PREF_HOST) */

static struct {
    double h2d, d2h, duplex, remote, fault_ns, fault, populate, hbm, launch_ns;
    unsigned long long total, free;
} rate;
static double host_t;                    /* ns: what the host has waited for */
static double legacy_t[MAX_DEVICES];     /* clocks of the legacy NULL streams */
static struct xfer {                     /* per stream slot: its latest transfer */
    int live, dir;                       /* dir 1 = h2d, 2 = d2h */
    double x0, bytes, rate, end;         /* bytes move from x0 at rate until end */
    double *clock;                       /* its stream's clock (end == *clock while live) */
} xfer[MAX_SLOTS];

static double env_num(const char *name, double dflt) {
    const char *v = getenv(name);
    return v && *v ? strtod(v, NULL) : dflt;
}

static void clock_configure(void) {
    rate.h2d = env_num("FAKE_CUDA_H2D_GBPS", 25);
    rate.d2h = env_num("FAKE_CUDA_D2H_GBPS", 20);
    rate.duplex = env_num("FAKE_CUDA_DUPLEX_GBPS", 30);
    rate.remote = env_num("FAKE_CUDA_REMOTE_GBPS", 12);
    rate.fault_ns = env_num("FAKE_CUDA_FAULT_US", 40) * 1e3;
    rate.fault = env_num("FAKE_CUDA_FAULT_GBPS", 8);
    rate.populate = env_num("FAKE_CUDA_POPULATE_GBPS", 200);
    rate.hbm = env_num("FAKE_CUDA_HBM_GBPS", 2000);
    rate.launch_ns = env_num("FAKE_CUDA_LAUNCH_US", 4) * 1e3;
    rate.total = (unsigned long long)env_num("FAKE_CUDA_TOTAL_BYTES", 80.0 * (1ull << 30));
    rate.free = (unsigned long long)env_num("FAKE_CUDA_FREE_BYTES", 64.0 * (1ull << 30));
    host_t = 0;
    memset(legacy_t, 0, sizeof legacy_t);
    memset(xfer, 0, sizeof xfer);
}

/* The clock of a stream argument (NULL: the current context's legacy stream, NULL when
 * no context is current) and its slot. */
static double *time_of(void *stream, int *slot) {
    if (stream) {
        *slot = ((handle *)stream)->slot;
        return &((handle *)stream)->t;
    }
    if (!current_ctx) return NULL;
    *slot = current_ctx->dev;
    return &legacy_t[current_ctx->dev];
}

/* When work queued now on a stream whose clock is t starts. */
static double start_at(const double *t) { return *t > host_t ? *t : host_t; }

/* Queue `ns` of work on the stream: its clock moves to start + launch + ns; anything
 * queued after a transfer ends that transfer's pairing. */
static void clock_queue(void *stream, double ns) {
    int slot;
    double *t = time_of(stream, &slot);
    if (!t) return;
    xfer[slot].live = 0;
    *t = start_at(t) + rate.launch_ns + ns;
}

/* Two transfers sharing the link from o: their bytes left there, rates scaled while both
 * move; writes their ends. */
static void share(struct xfer *a, struct xfer *b, double o) {
    double la = a->bytes - (o - a->x0) * a->rate, lb = b->bytes - (o - b->x0) * b->rate;
    double f = rate.duplex / (a->rate + b->rate);
    if (f > 1) f = 1;
    double ta = la / (a->rate * f), tb = lb / (b->rate * f);
    struct xfer *first = ta <= tb ? a : b, *last = ta <= tb ? b : a;
    double t1 = o + (ta <= tb ? ta : tb);
    double left = (last == a ? la : lb) - (t1 - o) * last->rate * f;
    first->end = t1;
    last->end = t1 + left / last->rate;
}

/* A transfer of `bytes` in direction dir (1 h2d, 2 d2h) on stream, plus `other_ns` of
 * work that is not link time (launch, population). */
static void clock_transfer(void *stream, int dir, double bytes, double other_ns) {
    int slot;
    double *t = time_of(stream, &slot);
    if (!t) return;
    if (bytes <= 0) {
        clock_queue(stream, other_ns);
        return;
    }
    struct xfer *x = &xfer[slot];
    x->dir = dir;
    x->rate = dir == 1 ? rate.h2d : rate.d2h;
    x->x0 = start_at(t) + rate.launch_ns + other_ns;
    x->bytes = bytes;
    x->end = x->x0 + bytes / x->rate;
    x->clock = t;
    x->live = 1;
    for (int j = 0; j < hi_slot; j++) {
        struct xfer *y = &xfer[j];
        if (j == slot || !y->live || y->dir == dir || y->end <= x->x0 || *y->clock != y->end)
            continue;
        share(x, y, x->x0 > y->x0 ? x->x0 : y->x0);
        *y->clock = y->end;
        y->live = 0; /* paired once */
        break;
    }
    *t = x->end;
}

/* The page states of allocation i and the first and last page of [p, p+n) (n > 0). */
static unsigned char *pages_of(int i, uintptr_t p, size_t n, size_t *first, size_t *last) {
    *first = (p - allocs[i].base) >> PAGE_SHIFT;
    *last = (p + n - 1 - allocs[i].base) >> PAGE_SHIFT;
    return allocs[i].pages;
}

/* Prefetch [p, p+n) of allocation i to the device (to_host 0) or the host: pages move,
 * queued on stream. */
static void clock_prefetch(int i, uintptr_t p, size_t n, int to_host, void *stream) {
    size_t first, last;
    unsigned char *pg = pages_of(i, p, n, &first, &last);
    double moved = 0, populated = 0;
    int dest = to_host ? 1 : 2;
    for (size_t k = first; k <= last; k++) {
        int loc = pg[k] & PG_LOC;
        if (loc == dest) continue;
        if (loc == 0) populated += 1 << PAGE_SHIFT;
        else moved += 1 << PAGE_SHIFT;
        pg[k] = (unsigned char)((pg[k] & ~(PG_LOC | PG_MAPPED)) | dest);
    }
    clock_transfer(stream, to_host ? 2 : 1, moved, populated / rate.populate);
}

/* The device reads or writes [p, p+n) of allocation i: ns it costs, pages migrated on
 * the fault path or accessed in place (see the header). */
static double clock_device_access(int i, uintptr_t p, size_t n) {
    size_t first, last;
    unsigned char *pg = pages_of(i, p, n, &first, &last);
    double remote = 0, migrated = 0, local = 0, populated = 0;
    unsigned long faults = 0;
    for (size_t k = first; k <= last; k++) {
        uintptr_t lo = allocs[i].base + (k << PAGE_SHIFT), hi = lo + (1 << PAGE_SHIFT);
        double bytes = (double)((hi < p + n ? hi : p + n) - (lo > p ? lo : p));
        int loc = pg[k] & PG_LOC;
        if (loc == 2) {
            local += bytes;
        } else if (loc == 0) { /* first touch: made on the device */
            faults++;
            populated += 1 << PAGE_SHIFT;
            local += bytes;
            pg[k] = (unsigned char)((pg[k] & ~PG_LOC) | 2);
        } else if (pg[k] & (PG_ACCESSED | PG_MAPPED)) {
            remote += bytes;
        } else if (pg[k] & PG_PREF_HOST) { /* faults once, then mapped in place */
            faults++;
            remote += bytes;
            pg[k] |= PG_MAPPED;
        } else {
            faults++;
            migrated += 1 << PAGE_SHIFT;
            local += bytes;
            pg[k] = (unsigned char)((pg[k] & ~PG_LOC) | 2);
        }
    }
    double batches = (double)((faults + 255) / 256);
    return batches * rate.fault_ns + migrated / rate.fault + populated / rate.populate +
           remote / rate.remote + local / rate.hbm;
}

/* cuMemAdvise on the fake's pages: advice 3/4 set/unset preferred location (host when
 * loc_host), 5/6 set/unset accessed by. */
static void clock_advise(int i, uintptr_t p, size_t n, int advice, int loc_host) {
    size_t first, last;
    unsigned char *pg = pages_of(i, p, n, &first, &last);
    for (size_t k = first; k <= last; k++) {
        if (advice == 3) pg[k] = (unsigned char)(loc_host ? pg[k] | PG_PREF_HOST
                                                          : pg[k] & ~PG_PREF_HOST);
        if (advice == 4) pg[k] &= (unsigned char)~(PG_PREF_HOST | PG_MAPPED);
        if (advice == 5) pg[k] |= PG_ACCESSED;
        if (advice == 6) pg[k] &= (unsigned char)~PG_ACCESSED;
    }
}
