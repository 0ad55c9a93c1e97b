/* A fake CUDA driver (libcuda.so.1) for tests: enough of the driver API for uvm_sched's
 * "cuda" backend, in plain C, so that backend runs on a machine without a GPU.
 *
 * - Only cuInit, cuDriverGetVersion and cuGetProcAddress(_v2) are exported; every other
 *   entry point is reachable only through cuGetProcAddress, as with the real driver when
 *   a library resolves by version.  cuMemPrefetchAsync / cuMemAdvise come in their
 *   8000 (device ordinal) and 12020 (CUmemLocation) forms, chosen by the version asked.
 * - Every call is recorded, one text line each: "<seq> <name> key=value ...", with streams
 *   and events named s<id> / e<id> (s0 = the NULL stream).  Read with
 *   fake_cuda_log() (in-process, via ctypes) or append to $FAKE_CUDA_LOG.
 * - Configuration, read again at every cuInit: FAKE_CUDA_VERSION (default 13000),
 *   FAKE_CUDA_DEVICES (default 1), FAKE_CUDA_FAIL="name:N[:code]" (the Nth call of name,
 *   or of any call with name "*", returns code; default CUDA_ERROR_OUT_OF_MEMORY = 2;
 *   several separated by commas), FAKE_CUDA_NO_DISCARD=1 (no cuMemDiscardBatchAsync).
 * - Managed memory is anonymous mmap, 2 MiB aligned like the real driver's; prefetch,
 *   advise and discard check that the range lies inside one allocation
 *   (CUDA_ERROR_INVALID_VALUE otherwise) and move nothing.
 * - Strict: it refuses what the CUDA 13 driver documents as invalid, one rule per row of
 *   PRECONDITIONS.md (beside this file, each with the cuda.h text it comes from): the
 *   legacy NULL stream for cuMemDiscardBatchAsync, an event recorded on a stream of
 *   another context, a legacy-stream call with no context current, and, where the driver
 *   says "undefined behaviour", a discard that may run at the same time as a prefetch or
 *   another discard of an overlapping range (CUDA_ERROR_INVALID_VALUE, logged "race"),
 *   and any use of a stream after cuStreamDestroy (CUDA_ERROR_INVALID_HANDLE, logged
 *   "destroyed stream").
 *   Stream order is tracked with a vector clock per stream: an event carries the clock
 *   of its stream when recorded, cuStreamWaitEvent merges it into the waiting stream, a
 *   completed cuEventSynchronize/cuEventQuery merges it into the host's clock, which
 *   every later call inherits.  Streams and events belong to the context current when
 *   they were made; FAKE_CUDA_DEVICES devices each have one primary context.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
    int type;
    int id;
} CUmemLocation;
/* Stream order: stream slots 0..MAX_DEVICES-1 are the legacy NULL streams of each device's
 * primary context; made streams take the next slots.  vc[j] = how much of slot j's work
 * this stream (or event, or the host) is ordered after. */
#define MAX_DEVICES 16
#define MAX_SLOTS 2048
typedef struct handle {
    char kind; /* 's' stream, 'e' event, 'c' context */
    int id;
    int dev;         /* stream, event: the device of the context it was made in */
    int slot;        /* stream: its vector-clock slot */
    int recorded_on; /* event: stream id of the last record */
    unsigned *vc;    /* stream: its clock; event: the clock captured by the last record */
    int capturing;   /* stream: inside a graph capture (fake_cuda_capture) */
    double t;        /* stream: ns when its queued work is done; event: its record's
                        (fake_clock.h) */
    int timing_off;  /* event: made with CU_EVENT_DISABLE_TIMING */
    int recorded;    /* event: cuEventRecord'ed at least once */
} handle;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
       INVALID_DEVICE = 101,
       INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *logbuf;
static size_t loglen, logcap;
static unsigned long long seq;
static int version = 13000, devices = 1, no_discard, initialised;
static int next_id = 1;
static __thread handle *current_ctx;
static handle primary[MAX_DEVICES];
static unsigned legacy_vc[MAX_DEVICES][MAX_SLOTS]; /* clocks of the legacy NULL streams */
static unsigned host_vc[MAX_SLOTS];                /* what the host has waited for */
static unsigned slot_clock[MAX_SLOTS]; /* a freed slot's clock, where its next user goes on */
static char slot_used[MAX_SLOTS];
static int hi_slot = MAX_DEVICES; /* slots below this may be in use */

/* Recent stream-ordered range operations, to find a discard that may overlap another. */
#define MAX_OPS 8192
static struct {
    uintptr_t lo, hi;
    int slot;
    unsigned clock;
    char kind; /* 'p' prefetch, 'd' discard */
} ops[MAX_OPS];
static unsigned long n_ops;

#define MAX_FAILS 8
static struct {
    char name[64];
    long n, count;
    int code;
} fails[MAX_FAILS];
static int n_fails;
static long total_calls;

#define MAX_ALLOCS 4096
static struct {
    uintptr_t base;
    size_t size, mapped;
    void *raw;
    unsigned char *pages; /* per 4 KiB page: where it lives, its advice (fake_clock.h) */
} allocs[MAX_ALLOCS];

#include "fake_clock.h"

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    char line[512];
    int n = snprintf(line, sizeof line, "%llu ", ++seq);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    line[n] = 0;
    if (loglen + (size_t)n + 1 > logcap) {
        size_t cap = logcap ? logcap * 2 : 1 << 16;
        while (cap < loglen + (size_t)n + 1) cap *= 2;
        char *b = realloc(logbuf, cap);
        if (!b) return;
        logbuf = b;
        logcap = cap;
    }
    memcpy(logbuf + loglen, line, (size_t)n + 1);
    loglen += (size_t)n;
    const char *path = getenv("FAKE_CUDA_LOG");
    if (path && *path) {
        FILE *f = fopen(path, "a");
        if (f) {
            fputs(line, f);
            fclose(f);
        }
    }
}

/* returns the injected error for this call, or OK */
static CUresult inject(const char *name) {
    total_calls++;
    CUresult r = OK;
    for (int i = 0; i < n_fails; i++) { /* every matching rule counts this call */
        if (strcmp(fails[i].name, name) && strcmp(fails[i].name, "*")) continue;
        if (++fails[i].count == fails[i].n && r == OK) r = fails[i].code;
    }
    return r;
}

static void configure(void) {
    const char *v = getenv("FAKE_CUDA_VERSION");
    version = v && *v ? atoi(v) : 13000;
    v = getenv("FAKE_CUDA_DEVICES");
    devices = v && *v ? atoi(v) : 1;
    v = getenv("FAKE_CUDA_NO_DISCARD");
    no_discard = v && *v && strcmp(v, "0");
    n_fails = 0;
    total_calls = 0;
    clock_configure();
    v = getenv("FAKE_CUDA_FAIL");
    if (v && *v) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", v);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok && n_fails < MAX_FAILS;
             tok = strtok_r(NULL, ",", &save)) {
            char name[64] = "";
            long n = 0;
            int code = OUT_OF_MEMORY;
            if (sscanf(tok, "%63[^:]:%ld:%d", name, &n, &code) >= 2 && n > 0) {
                snprintf(fails[n_fails].name, sizeof fails[n_fails].name, "%s", name);
                fails[n_fails].n = n;
                fails[n_fails].count = 0;
                fails[n_fails].code = code;
                n_fails++;
            }
        }
    }
}

/* Handles we made, so a bogus stream value from a caller is reported, never dereferenced. */
#define MAX_HANDLES 4096
static handle *handles[MAX_HANDLES];

static int hid(void *h) {
    if (!h) return 0;
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i] == h) return h == (void *)handles[i] ? ((handle *)h)->id : 0;
    for (int i = 0; i < MAX_DEVICES; i++)
        if (h == (void *)&primary[i]) return primary[i].id;
    return -1; /* not a handle of this driver */
}

static void forget(void *h) {
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i] == h) handles[i] = NULL;
}

/* Destroyed streams, kept (not freed) so that a later use of the handle is told apart
 * from a stream made since at the same address: refused (INVALID_HANDLE, logged
 * "destroyed").  The oldest is freed when the list is full; its address may then be
 * reused by a new stream, as the real driver's may once the stream's work is done. */
#define MAX_DEAD 1024
static handle *dead[MAX_DEAD];
static unsigned long n_dead;

static int dead_id(const void *h) {
    for (int i = 0; h && i < MAX_DEAD; i++)
        if (dead[i] == h) return dead[i]->id;
    return 0;
}

/* A stream argument of call: OK, INVALID_HANDLE for a destroyed stream, INVALID_VALUE
 * for a value this driver never made. */
static CUresult stream_arg(const char *call, void *s) {
    int d = dead_id(s);
    if (d) {
        logf_("destroyed stream s%d used by %s", d, call);
        return INVALID_HANDLE;
    }
    return hid(s) < 0 ? INVALID_VALUE : OK;
}

static int find_alloc(uintptr_t p, size_t n) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && p >= allocs[i].base && p + n <= allocs[i].base + allocs[i].size)
            return i;
    return -1;
}

#define ENTER(name)                                                                            \
    pthread_mutex_lock(&mu);                                                                   \
    CUresult r_ = initialised ? inject(name) : NOT_INITIALIZED;
#define LEAVE(...)                                                                             \
    do {                                                                                       \
        logf_(__VA_ARGS__);                                                                    \
        pthread_mutex_unlock(&mu);                                                             \
        return r_;                                                                             \
    } while (0)

EXPORT CUresult cuInit(unsigned flags) {
    pthread_mutex_lock(&mu);
    configure();
    initialised = devices > 0;
    CUresult r_ = devices > 0 ? inject("cuInit") : NO_DEVICE;
    LEAVE("cuInit flags=%u -> %d", flags, r_);
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    *v = version;
    return OK;
}

static CUresult f_error_name(CUresult e, const char **s) {
    switch (e) {
    case OK: *s = "CUDA_SUCCESS"; break;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case NOT_READY: *s = "CUDA_ERROR_NOT_READY"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; return INVALID_VALUE;
    }
    return OK;
}

static CUresult f_device_count(int *n) {
    ENTER("cuDeviceGetCount");
    if (!r_) *n = devices;
    LEAVE("cuDeviceGetCount -> %d", r_);
}

static CUresult f_device_get(int *d, int ordinal) {
    ENTER("cuDeviceGet");
    if (!r_ && (ordinal < 0 || ordinal >= devices)) r_ = INVALID_VALUE;
    if (!r_) *d = ordinal;
    LEAVE("cuDeviceGet ordinal=%d -> %d", ordinal, r_);
}

static CUresult f_primary_retain(void **ctx, int dev) {
    ENTER("cuDevicePrimaryCtxRetain");
    if (!r_ && (dev < 0 || dev >= devices || dev >= MAX_DEVICES)) r_ = INVALID_VALUE;
    if (!r_) {
        primary[dev].kind = 'c';
        primary[dev].id = 1000 + dev;
        primary[dev].dev = dev;
        *ctx = &primary[dev];
    }
    LEAVE("cuDevicePrimaryCtxRetain dev=%d -> %d", dev, r_);
}

static CUresult f_primary_release(int dev) {
    ENTER("cuDevicePrimaryCtxRelease");
    LEAVE("cuDevicePrimaryCtxRelease dev=%d -> %d", dev, r_);
}

static CUresult f_ctx_get(void **ctx) {
    ENTER("cuCtxGetCurrent");
    if (!r_) *ctx = current_ctx;
    pthread_mutex_unlock(&mu); /* not logged: called before most calls */
    return r_;
}

static CUresult f_ctx_set(void *ctx) {
    ENTER("cuCtxSetCurrent");
    if (!r_) current_ctx = ctx;
    LEAVE("cuCtxSetCurrent ctx=c%d -> %d", hid(ctx), r_);
}

static CUresult f_ctx_get_device(int *dev) {
    ENTER("cuCtxGetDevice");
    if (!r_ && !current_ctx) r_ = INVALID_CONTEXT;
    if (!r_) *dev = current_ctx->dev;
    pthread_mutex_unlock(&mu); /* not logged, like cuCtxGetCurrent */
    return r_;
}

#define NEED_CTX()                                                                             \
    if (!r_ && !current_ctx) r_ = INVALID_CONTEXT;

/* The clock of a stream argument: a made stream's own, or for NULL (the legacy stream)
 * that of the current context (NULL when none is current: INVALID_CONTEXT). */
static unsigned *clock_of(void *stream, int *slot, int *dev) {
    if (stream) {
        handle *h = stream;
        *slot = h->slot;
        *dev = h->dev;
        return h->vc;
    }
    if (!current_ctx) return NULL;
    *slot = *dev = current_ctx->dev;
    return legacy_vc[current_ctx->dev];
}

static void vc_merge(unsigned *into, const unsigned *from) {
    for (int i = 0; i < hi_slot; i++)
        if (from[i] > into[i]) into[i] = from[i];
}

/* A stream-ordered range operation on stream: INVALID_VALUE (and a "race" log line) when a
 * discard and another operation on an overlapping range of another stream may run at the
 * same time (neither ordered after the other by events or a host wait). */
static CUresult range_op(char kind, void *stream, uintptr_t lo, uintptr_t hi) {
    int slot, dev;
    unsigned *vc = clock_of(stream, &slot, &dev);
    if (!vc) return INVALID_CONTEXT;
    vc_merge(vc, host_vc);
    unsigned long first = n_ops > MAX_OPS ? n_ops - MAX_OPS : 0;
    for (unsigned long i = first; i < n_ops; i++) {
        const __typeof__(ops[0]) *o = &ops[i % MAX_OPS];
        if (!o->kind || o->slot == slot || o->hi <= lo || hi <= o->lo) continue;
        if (kind != 'd' && o->kind != 'd') continue;
        if (vc[o->slot] >= o->clock) continue; /* ordered after it */
        logf_("race %s on slot %d with a %s on slot %d of [0x%llx, 0x%llx)",
              kind == 'd' ? "discard" : "prefetch", slot, o->kind == 'd' ? "discard" : "prefetch",
              o->slot, (unsigned long long)o->lo, (unsigned long long)o->hi);
        return INVALID_VALUE;
    }
    vc[slot]++;
    __typeof__(ops[0]) *o = &ops[n_ops++ % MAX_OPS];
    o->lo = lo;
    o->hi = hi;
    o->slot = slot;
    o->clock = vc[slot];
    o->kind = kind;
    return OK;
}

static CUresult f_alloc_managed(CUdeviceptr *dptr, size_t bytes, unsigned flags) {
    ENTER("cuMemAllocManaged");
    NEED_CTX();
    if (!r_ && (bytes == 0 || flags != 1)) r_ = INVALID_VALUE;
    int slot = -1;
    for (int i = 0; !r_ && i < MAX_ALLOCS; i++)
        if (!allocs[i].base) {
            slot = i;
            break;
        }
    if (!r_ && slot < 0) r_ = OUT_OF_MEMORY;
    if (!r_) {
        size_t align = (size_t)2 << 20, mapped = bytes + align;
        void *raw = mmap(NULL, mapped, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        unsigned char *pages = calloc((bytes >> PAGE_SHIFT) + 1, 1);
        if (raw == MAP_FAILED || !pages) {
            if (raw != MAP_FAILED) munmap(raw, mapped);
            free(pages);
            r_ = OUT_OF_MEMORY;
        } else {
            allocs[slot].pages = pages;
            allocs[slot].raw = raw;
            allocs[slot].mapped = mapped;
            allocs[slot].base = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
            allocs[slot].size = bytes;
            *dptr = allocs[slot].base;
        }
    }
    LEAVE("cuMemAllocManaged bytes=%zu flags=%u ptr=0x%llx -> %d", bytes, flags,
          r_ ? 0ull : (unsigned long long)*dptr, r_);
}

static CUresult f_mem_free(CUdeviceptr p) {
    ENTER("cuMemFree");
    NEED_CTX();
    int i = -1;
    for (int k = 0; k < MAX_ALLOCS; k++)
        if (allocs[k].base == p && p) i = k;
    if (!r_ && i < 0) r_ = INVALID_VALUE;
    if (!r_) {
        munmap(allocs[i].raw, allocs[i].mapped);
        free(allocs[i].pages);
        memset(&allocs[i], 0, sizeof allocs[i]);
        /* cuMemFree synchronises: the host is now ordered after everything queued */
        for (int d = 0; d < MAX_DEVICES; d++) {
            vc_merge(host_vc, legacy_vc[d]);
            if (legacy_t[d] > host_t) host_t = legacy_t[d];
        }
        for (int k = 0; k < MAX_HANDLES; k++)
            if (handles[k] && handles[k]->kind == 's') {
                vc_merge(host_vc, handles[k]->vc);
                if (handles[k]->t > host_t) host_t = handles[k]->t;
            }
    }
    LEAVE("cuMemFree ptr=0x%llx -> %d", p, r_);
}

static CUresult f_prefetch_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags,
                              void *stream) {
    ENTER("cuMemPrefetchAsync");
    NEED_CTX();
    if (!r_) r_ = stream_arg("cuMemPrefetchAsync", stream);
    if (!r_ && find_alloc(p, n) < 0) r_ = INVALID_VALUE;
    if (!r_ && !(loc.type == 2 || (loc.type == 1 && loc.id >= 0 && loc.id < devices)))
        r_ = INVALID_VALUE;
    if (!r_ && flags != 0) r_ = INVALID_VALUE; /* "flags: reserved for future use, must be 0" */
    if (!r_) r_ = range_op('p', stream, (uintptr_t)p, (uintptr_t)p + n);
    if (!r_ && n) clock_prefetch(find_alloc(p, n), p, n, loc.type == 2, stream);
    LEAVE("cuMemPrefetchAsync_v2 ptr=0x%llx bytes=%zu loc.type=%d loc.id=%d flags=%u stream=s%d -> %d",
          p, n, loc.type, loc.id, flags, hid(stream), r_);
}

static CUresult f_prefetch_v1(CUdeviceptr p, size_t n, int dev, void *stream) {
    ENTER("cuMemPrefetchAsync");
    NEED_CTX();
    if (!r_) r_ = stream_arg("cuMemPrefetchAsync", stream);
    if (!r_ && find_alloc(p, n) < 0) r_ = INVALID_VALUE;
    if (!r_ && !(dev == -1 || (dev >= 0 && dev < devices))) r_ = INVALID_VALUE;
    if (!r_) r_ = range_op('p', stream, (uintptr_t)p, (uintptr_t)p + n);
    if (!r_ && n) clock_prefetch(find_alloc(p, n), p, n, dev == -1, stream);
    LEAVE("cuMemPrefetchAsync_v1 ptr=0x%llx bytes=%zu device=%d stream=s%d -> %d", p, n, dev,
          hid(stream), r_);
}

static CUresult f_advise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
    ENTER("cuMemAdvise");
    NEED_CTX();
    if (!r_ && find_alloc(p, n) < 0) r_ = INVALID_VALUE;
    if (!r_ && (advice < 1 || advice > 6)) r_ = INVALID_VALUE;
    /* a device location must name a device; SET_READ_MOSTLY and the UNSETs of preferred
     * location ignore the location */
    if (!r_ && (advice == 3 || advice == 5 || advice == 6) &&
        !(loc.type == 2 || (loc.type == 1 && loc.id >= 0 && loc.id < devices)))
        r_ = INVALID_VALUE;
    if (!r_ && n) clock_advise(find_alloc(p, n), p, n, advice, loc.type == 2);
    LEAVE("cuMemAdvise_v2 ptr=0x%llx bytes=%zu advice=%d loc.type=%d loc.id=%d -> %d", p, n,
          advice, loc.type, loc.id, r_);
}

static CUresult f_advise_v1(CUdeviceptr p, size_t n, int advice, int dev) {
    ENTER("cuMemAdvise");
    NEED_CTX();
    if (!r_ && find_alloc(p, n) < 0) r_ = INVALID_VALUE;
    if (!r_ && n) clock_advise(find_alloc(p, n), p, n, advice, dev == -1);
    LEAVE("cuMemAdvise_v1 ptr=0x%llx bytes=%zu advice=%d device=%d -> %d", p, n, advice, dev, r_);
}

static CUresult f_discard(CUdeviceptr *ps, size_t *ns, size_t count, unsigned long long flags,
                          void *stream) {
    ENTER("cuMemDiscardBatchAsync");
    NEED_CTX();
    if (!r_) r_ = stream_arg("cuMemDiscardBatchAsync", stream);
    if (!r_ && !stream) r_ = INVALID_VALUE; /* "Must not be legacy NULL stream" */
    if (!r_ && (flags != 0 || count == 0)) r_ = INVALID_VALUE;
    for (size_t i = 0; !r_ && i < count; i++)
        if (find_alloc(ps[i], ns[i]) < 0) r_ = INVALID_VALUE;
    for (size_t i = 0; !r_ && i < count; i++)
        r_ = range_op('d', stream, (uintptr_t)ps[i], (uintptr_t)ps[i] + ns[i]);
    if (!r_) clock_queue(stream, 0);
    LEAVE("cuMemDiscardBatchAsync count=%zu ptr=0x%llx bytes=%zu flags=%llu stream=s%d -> %d",
          count, count ? ps[0] : 0ull, count ? ns[0] : (size_t)0, flags, hid(stream), r_);
}

static handle *new_handle(char kind, int dev) {
    int slot = MAX_DEVICES;
    while (kind == 's' && slot < MAX_SLOTS && slot_used[slot]) slot++;
    if (slot >= MAX_SLOTS) return NULL; /* more live streams than the clocks hold */
    handle *h = calloc(1, sizeof *h);
    if (h) h->vc = calloc(MAX_SLOTS, sizeof *h->vc);
    if (h && !h->vc) {
        free(h);
        return NULL;
    }
    if (h) {
        h->kind = kind;
        h->id = next_id++;
        h->dev = dev;
        if (kind == 's') {
            h->slot = slot;
            slot_used[slot] = 1;
            h->vc[slot] = slot_clock[slot];
            if (slot >= hi_slot) hi_slot = slot + 1;
        }
        for (int i = 0; i < MAX_HANDLES; i++)
            if (!handles[i]) {
                handles[i] = h;
                break;
            }
    }
    return h;
}

static CUresult f_stream_create(void **s, unsigned flags) {
    ENTER("cuStreamCreate");
    NEED_CTX();
    handle *h = r_ ? NULL : new_handle('s', current_ctx->dev);
    if (!r_ && !h) r_ = OUT_OF_MEMORY;
    if (!r_) *s = h;
    LEAVE("cuStreamCreate flags=%u stream=s%d -> %d", flags, hid(h), r_);
}

static CUresult f_stream_destroy(void *s) {
    ENTER("cuStreamDestroy");
    if (!r_) r_ = stream_arg("cuStreamDestroy", s);
    int id = hid(s);
    if (!r_ && !s) r_ = INVALID_HANDLE; /* the legacy stream is not destroyed */
    if (!r_) {
        handle *h = s;
        slot_clock[h->slot] = h->vc[h->slot];
        slot_used[h->slot] = 0;
        xfer[h->slot].live = 0; /* its clock goes with it */
        for (unsigned long i = 0; i < MAX_OPS; i++) /* its work is no one's to race now */
            if (ops[i].slot == h->slot) ops[i].kind = 0;
        forget(s);
        free(h->vc);
        h->vc = NULL;
        handle **at = &dead[n_dead++ % MAX_DEAD];
        free(*at);
        *at = h;
    }
    LEAVE("cuStreamDestroy stream=s%d -> %d", id, r_);
}

static CUresult f_event_create(void **e, unsigned flags) {
    ENTER("cuEventCreate");
    NEED_CTX();
    handle *h = r_ ? NULL : new_handle('e', current_ctx->dev);
    if (!r_ && !h) r_ = OUT_OF_MEMORY;
    if (!r_) {
        *e = h;
        h->timing_off = (flags & 2) != 0; /* CU_EVENT_DISABLE_TIMING */
    }
    LEAVE("cuEventCreate flags=%u event=e%d -> %d", flags, hid(h), r_);
}

static CUresult f_event_destroy(void *e) {
    ENTER("cuEventDestroy");
    int id = hid(e);
    if (!r_ && id <= 0) r_ = INVALID_VALUE;
    if (!r_) {
        forget(e);
        free(((handle *)e)->vc);
        free(e);
    }
    LEAVE("cuEventDestroy event=e%d -> %d", id, r_);
}

static CUresult f_event_record(void *e, void *s) {
    ENTER("cuEventRecord");
    if (!r_) r_ = stream_arg("cuEventRecord", s);
    if (!r_ && hid(e) <= 0) r_ = INVALID_VALUE;
    int slot = 0, dev = 0;
    unsigned *vc = r_ ? NULL : clock_of(s, &slot, &dev);
    if (!r_ && !vc) r_ = INVALID_CONTEXT; /* NULL stream: the current context's */
    /* "hEvent and hStream must be from the same context" */
    if (!r_ && ((handle *)e)->dev != dev) r_ = INVALID_HANDLE;
    if (!r_) {
        handle *h = e;
        h->recorded_on = hid(s);
        memcpy(h->vc, vc, MAX_SLOTS * sizeof *vc);
        int tslot;
        double *t = time_of(s, &tslot);
        h->t = start_at(t); /* done when the stream's earlier work is */
        xfer[tslot].live = 0;
        h->recorded = 1;
    }
    LEAVE("cuEventRecord event=e%d stream=s%d -> %d", hid(e), hid(s), r_);
}

static CUresult f_stream_wait(void *s, void *e, unsigned flags) {
    ENTER("cuStreamWaitEvent");
    if (!r_) r_ = stream_arg("cuStreamWaitEvent", s);
    if (!r_ && hid(e) <= 0) r_ = INVALID_VALUE;
    if (!r_ && flags != 0 && flags != 1) r_ = INVALID_VALUE;
    /* the event may be of another context or device ("hEvent may be from a different
     * context or device than hStream") */
    int slot, dev;
    unsigned *vc = r_ ? NULL : clock_of(s, &slot, &dev);
    if (!r_ && !vc) r_ = INVALID_CONTEXT;
    if (!r_) {
        vc_merge(vc, ((handle *)e)->vc);
        int tslot;
        double *t = time_of(s, &tslot);
        if (((handle *)e)->t > *t) *t = ((handle *)e)->t;
    }
    LEAVE("cuStreamWaitEvent stream=s%d event=e%d flags=%u -> %d", hid(s), hid(e), flags, r_);
}

/* The host waited for event e: ordered after its record, its clock at least its time. */
static void host_wait(handle *e) {
    vc_merge(host_vc, e->vc);
    if (e->t > host_t) host_t = e->t;
}

static CUresult f_event_query(void *e) {
    ENTER("cuEventQuery");
    if (!r_ && hid(e) <= 0) r_ = INVALID_HANDLE;
    if (!r_) host_wait(e); /* nothing runs: always complete */
    LEAVE("cuEventQuery event=e%d -> %d", hid(e), r_);
}

static CUresult f_event_sync(void *e) {
    ENTER("cuEventSynchronize");
    if (!r_ && hid(e) <= 0) r_ = INVALID_HANDLE;
    if (!r_) host_wait(e);
    LEAVE("cuEventSynchronize event=e%d -> %d", hid(e), r_);
}

/* everything queued in the current context is done: the host is ordered after it (the
 * fake runs no work, so only the clocks move) */
static CUresult f_ctx_sync(void) {
    ENTER("cuCtxSynchronize");
    NEED_CTX();
    if (!r_) {
        int dev = current_ctx->dev;
        vc_merge(host_vc, legacy_vc[dev]);
        if (legacy_t[dev] > host_t) host_t = legacy_t[dev];
        for (int k = 0; k < MAX_HANDLES; k++)
            if (handles[k] && handles[k]->kind == 's' && handles[k]->dev == dev) {
                vc_merge(host_vc, handles[k]->vc);
                if (handles[k]->t > host_t) host_t = handles[k]->t;
            }
    }
    LEAVE("cuCtxSynchronize ctx=c%d -> %d", hid(current_ctx), r_);
}

/* cuda.h: "If cuEventRecord() has not been called on either event then
 * CUDA_ERROR_INVALID_HANDLE is returned. If cuEventRecord() has been called on both events
 * but one or both of them has not yet been completed ... CUDA_ERROR_NOT_READY is returned.
 * If either event was created with the CU_EVENT_DISABLE_TIMING flag, then this function
 * will return CUDA_ERROR_INVALID_HANDLE." (T1-T3 in PRECONDITIONS.md) */
static CUresult f_event_elapsed(float *ms, void *a, void *b) {
    ENTER("cuEventElapsedTime");
    if (!r_ && (hid(a) <= 0 || hid(b) <= 0 || ((handle *)a)->kind != 'e' ||
                ((handle *)b)->kind != 'e'))
        r_ = INVALID_HANDLE;
    handle *x = a, *y = b;
    if (!r_ && (x->timing_off || y->timing_off)) r_ = INVALID_HANDLE;
    if (!r_ && (!x->recorded || !y->recorded)) r_ = INVALID_HANDLE;
    if (!r_ && (x->t > host_t || y->t > host_t)) r_ = NOT_READY; /* not waited for */
    if (!r_) *ms = (float)((y->t - x->t) / 1e6);
    LEAVE("cuEventElapsedTime start=e%d end=e%d -> %d", hid(a), hid(b), r_);
}

/* A device-side operation on managed memory (memset, copy): the range must lie in one
 * allocation of this fake (the real driver takes any device memory; the fake has only
 * managed memory: M2). */
static CUresult f_memset_d8_async(CUdeviceptr p, unsigned char v, size_t n, void *stream) {
    ENTER("cuMemsetD8Async");
    NEED_CTX();
    if (!r_) r_ = stream_arg("cuMemsetD8Async", stream);
    int i = find_alloc(p, n);
    if (!r_ && i < 0) r_ = INVALID_VALUE;
    if (!r_) r_ = range_op('p', stream, (uintptr_t)p, (uintptr_t)p + n);
    if (!r_) clock_queue(stream, n ? clock_device_access(i, p, n) : 0);
    LEAVE("cuMemsetD8Async ptr=0x%llx value=%u bytes=%zu stream=s%d -> %d", p, v, n,
          hid(stream), r_);
}

static CUresult f_memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
    ENTER("cuMemcpyDtoDAsync");
    NEED_CTX();
    if (!r_) r_ = stream_arg("cuMemcpyDtoDAsync", stream);
    int i = find_alloc(src, n), j = find_alloc(dst, n);
    if (!r_ && (i < 0 || j < 0)) r_ = INVALID_VALUE;
    if (!r_) r_ = range_op('p', stream, (uintptr_t)src, (uintptr_t)src + n);
    if (!r_) r_ = range_op('p', stream, (uintptr_t)dst, (uintptr_t)dst + n);
    /* a copy engine reads and writes at once: the slower side sets the pace */
    double rd = !r_ && n ? clock_device_access(i, src, n) : 0;
    double wr = !r_ && n ? clock_device_access(j, dst, n) : 0;
    if (!r_) clock_queue(stream, rd > wr ? rd : wr);
    LEAVE("cuMemcpyDtoDAsync dst=0x%llx src=0x%llx bytes=%zu stream=s%d -> %d", dst, src, n,
          hid(stream), r_);
}

static CUresult f_mem_get_info(size_t *free_bytes, size_t *total) {
    ENTER("cuMemGetInfo");
    NEED_CTX();
    if (!r_ && (!free_bytes || !total)) r_ = INVALID_VALUE;
    if (!r_) {
        *free_bytes = (size_t)rate.free;
        *total = (size_t)rate.total;
    }
    LEAVE("cuMemGetInfo -> %d", r_);
}

static CUresult f_device_get_name(char *name, int len, int dev) {
    ENTER("cuDeviceGetName");
    if (!r_ && (!name || len <= 0)) r_ = INVALID_VALUE;
    if (!r_ && (dev < 0 || dev >= devices)) r_ = INVALID_DEVICE;
    if (!r_) snprintf(name, (size_t)len, "Fake GPU %d", dev);
    LEAVE("cuDeviceGetName dev=%d -> %d", dev, r_);
}

static CUresult f_stream_is_capturing(void *s, int *status) {
    ENTER("cuStreamIsCapturing");
    if (!r_ && stream_arg("cuStreamIsCapturing", s) != OK) r_ = INVALID_HANDLE;
    if (!r_ && !s && !current_ctx) r_ = INVALID_CONTEXT;
    if (!r_) *status = s ? ((handle *)s)->capturing : 0;
    LEAVE("cuStreamIsCapturing stream=s%d -> %d", hid(s), r_);
}

static CUresult getproc(const char *sym, void **pfn, int ver, unsigned long long flags,
                        int *status) {
    (void)flags;
    void *f = NULL;
    struct {
        const char *name;
        int since;
        void *fn;
    } table[] = {
        {"cuGetErrorName", 6000, (void *)f_error_name},
        {"cuDeviceGetCount", 2000, (void *)f_device_count},
        {"cuDeviceGet", 2000, (void *)f_device_get},
        {"cuDevicePrimaryCtxRetain", 7000, (void *)f_primary_retain},
        {"cuDevicePrimaryCtxRelease", 7000, (void *)f_primary_release},
        {"cuCtxGetCurrent", 4000, (void *)f_ctx_get},
        {"cuCtxSetCurrent", 4000, (void *)f_ctx_set},
        {"cuCtxGetDevice", 2000, (void *)f_ctx_get_device},
        {"cuMemAllocManaged", 6000, (void *)f_alloc_managed},
        {"cuMemFree", 3020, (void *)f_mem_free},
        {"cuStreamCreate", 2000, (void *)f_stream_create},
        {"cuStreamDestroy", 4000, (void *)f_stream_destroy},
        {"cuEventCreate", 2000, (void *)f_event_create},
        {"cuEventDestroy", 4000, (void *)f_event_destroy},
        {"cuEventRecord", 2000, (void *)f_event_record},
        {"cuStreamWaitEvent", 3020, (void *)f_stream_wait},
        {"cuEventQuery", 2000, (void *)f_event_query},
        {"cuEventSynchronize", 2000, (void *)f_event_sync},
        {"cuCtxSynchronize", 2000, (void *)f_ctx_sync},
        {"cuStreamIsCapturing", 10000, (void *)f_stream_is_capturing},
        {"cuEventElapsedTime", 2000, (void *)f_event_elapsed},
        {"cuMemsetD8Async", 3020, (void *)f_memset_d8_async},
        {"cuMemcpyDtoDAsync", 3020, (void *)f_memcpy_dtod_async},
        {"cuMemGetInfo", 3020, (void *)f_mem_get_info},
        {"cuDeviceGetName", 2000, (void *)f_device_get_name},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(sym, table[i].name) && ver >= table[i].since) f = table[i].fn;
    /* versioned ABIs: the 12020 forms take a CUmemLocation */
    if (!strcmp(sym, "cuMemPrefetchAsync"))
        f = ver >= 12020 && version >= 12020 ? (void *)f_prefetch_v2 : (void *)f_prefetch_v1;
    if (!strcmp(sym, "cuMemAdvise"))
        f = ver >= 12020 && version >= 12020 ? (void *)f_advise_v2 : (void *)f_advise_v1;
    if (!strcmp(sym, "cuMemDiscardBatchAsync"))
        f = ver >= 13000 && version >= 13000 && !no_discard ? (void *)f_discard : NULL;
    if (ver > version && f) f = NULL; /* asking for an ABI newer than the driver */
    *pfn = f;
    if (status) *status = f ? 0 : 1;
    return f ? OK : NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
                                    unsigned long long flags, int *status) {
    return getproc(sym, pfn, ver, flags, status);
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
    return getproc(sym, pfn, ver, flags, NULL);
}

/* ---- test control (ctypes) ---- */
EXPORT void *fake_cuda_stream_create_on(int dev) {
    pthread_mutex_lock(&mu);
    handle *h = new_handle('s', dev);
    if (h) logf_("app stream dev=%d s%d", dev, h->id);
    pthread_mutex_unlock(&mu);
    return h;
}

/* a stream as the application would have made it (for the "compute stream" of tests) */
EXPORT void *fake_cuda_stream_create(void) { return fake_cuda_stream_create_on(0); }

/* what a kernel of the application does: a stream-ordered use of [p, p+n) on stream */
EXPORT int fake_cuda_touch(void *stream, unsigned long long p, size_t n) {
    pthread_mutex_lock(&mu);
    CUresult r = range_op('p', stream, (uintptr_t)p, (uintptr_t)p + n);
    logf_("app touch ptr=0x%llx bytes=%zu stream=s%d -> %d", p, n, hid(stream), r);
    pthread_mutex_unlock(&mu);
    return r;
}

/* what cuStreamBeginCapture / cuStreamEndCapture would do to the capture status */
EXPORT void fake_cuda_capture(void *stream, int on) {
    pthread_mutex_lock(&mu);
    if (hid(stream) > 0) ((handle *)stream)->capturing = on != 0;
    logf_("app capture stream=s%d on=%d", hid(stream), on);
    pthread_mutex_unlock(&mu);
}

EXPORT const char *fake_cuda_log(void) { return logbuf ? logbuf : ""; }

EXPORT void fake_cuda_log_clear(void) {
    pthread_mutex_lock(&mu);
    loglen = 0;
    if (logbuf) logbuf[0] = 0;
    pthread_mutex_unlock(&mu);
}

EXPORT int fake_cuda_live_allocations(void) {
    int n = 0;
    for (int i = 0; i < MAX_ALLOCS; i++) n += allocs[i].base != 0;
    return n;
}
