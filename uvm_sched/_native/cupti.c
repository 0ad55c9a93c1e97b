/* GPU page-fault samples from CUPTI's Unified Memory counter records, for sampled planning
 * without a framework (Note [Fault probes] in uvm_sched/planner/_faults.py says what they
 * are used for).  libcupti is dlopen'd like libcuda: $UVM_SCHED_LIBCUPTI, else the path
 * given, else libcupti.so / .so.13 / .so.12 on the loader's path; absent -> UVM_ENOBACKEND
 * with why in the last error (Python then plans obliviously and says so).
 *
 * Sequence (cupti_activity.h, CUDA 13.0): cuptiActivityRegisterCallbacks (buffers are
 * ours: a request callback hands CUPTI a buffer, a completion callback gives it back with
 * records); cuptiActivityConfigureUnifiedMemoryCounter with the GPU page-fault counter
 * enabled ("Set the configuration before enabling the corresponding activity kind");
 * cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER); then faults arrive in
 * buffers, delivered when full or at cuptiActivityFlushAll (uvm_sched_cupti_flush, which
 * the runtime calls at each warm-up marker and at the end of the warm-up).
 *
 * Records: CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER = 25 is a
 * CUpti_ActivityUnifiedMemoryCounter3 (cupti_activity.h: "The corresponding activity
 * record structure is CUpti_ActivityUnifiedMemoryCounter3"), packed and 8-byte aligned
 * (cupti_common.h PACKED_ALIGNMENT).  We read only the fields up to `flags`, whose offsets
 * are the same in CUpti_ActivityUnifiedMemoryCounter2 (CUDA 11/12: Counter3 appends
 * `processors[5]`), and step from record to record with cuptiActivityGetNextRecord, which
 * knows the record size of the library loaded.  A GPU page fault
 * (counterKind CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT = 4) gives
 * `address` ("the virtual address for the page that faulted"), `start` ("captured when
 * CUDA driver started processing the fault", ns on CUPTI's clock), `value` ("the number
 * of page fault groups for the same page"), `srcId` (the device) and `flags`
 * (CUpti_ActivityUnifiedMemoryAccessType).  Other counter kinds are counted and skipped.
 *
 * Clocks: CUPTI timestamps are on CUPTI's clock (cuptiGetTimestamp), the event ring's on
 * CLOCK_MONOTONIC.  uvm_sched_cupti_clock reads both (monotonic before and after CUPTI's;
 * the pair is CUPTI's reading and the midpoint), and the Python side maps a fault's time
 * between such pairs (taken at start and at every flush) to the ring's clock, then to the
 * allocator-event tick in force then (uvm_sched/_runtime_faults.py).
 *
 * Threads: CUPTI may call the completion callback on a thread of its own, so the samples
 * have their own lock (never uvm_g.lock: a flush delivers buffers from the calling
 * thread, which may be anywhere).  Samples beyond the table's capacity
 * ($UVM_SCHED_CUPTI_SAMPLES, default 2^18) are counted as lost, never block. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glibc_compat.h"
#include "internal.h"

typedef int CUptiResult;
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER 25
#define CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE 1
#define CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT 4
#define CUPTI_ACTIVITY_FLAG_FLUSH_FORCED 1 /* CUpti_ActivityFlag, cupti_activity.h */

/* CUpti_ActivityUnifiedMemoryCounterConfig (cupti_activity.h): scope, kind, deviceId,
 * enable, four 32-bit fields, packed */
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t scope, kind, deviceId, enable;
} um_config;

/* The head of CUpti_ActivityUnifiedMemoryCounter3 (and 2): what we read. */
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind, counterKind;
    uint64_t value, start, end, address;
    uint32_t srcId, dstId, streamId, processId, flags, pad;
} um_record_head;
_Static_assert(sizeof(um_record_head) == 64, "CUpti_ActivityUnifiedMemoryCounter2/3 head");
_Static_assert(offsetof(um_record_head, address) == 32, "address at 32");
_Static_assert(offsetof(um_record_head, flags) == 56, "flags at 56");

typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

#define BUFFER_BYTES ((size_t)1 << 20)

static struct {
    pthread_mutex_t lock; /* guards the sample table and counters below */
    void *lib;
    int on;
    CUptiResult (*register_callbacks)(req_fn, done_fn);
    CUptiResult (*configure)(um_config *, uint32_t);
    CUptiResult (*enable)(int);
    CUptiResult (*disable)(int);
    CUptiResult (*next_record)(uint8_t *, size_t, void **);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*timestamp)(uint64_t *);
    CUptiResult (*dropped)(void *, uint32_t, size_t *);
    CUptiResult (*result_string)(CUptiResult, const char **);
    uvm_fault_sample *samples;
    size_t n, cap;
    uint64_t records, faults, other_counters, lost, buffers, buffer_failures, bad_buffers,
        cupti_dropped;
} C = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int cupti_fail(const char *call, CUptiResult r) {
    const char *s = NULL;
    if (!C.result_string || C.result_string(r, &s) != CUPTI_SUCCESS || !s) s = "?";
    uvm_set_error("%s failed: %s (%d)", call, s, r);
    return r == 28 /* CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED */ ||
                   r == 29 /* ..._NOT_SUPPORTED_ON_DEVICE */ ||
                   r == 30 /* ..._NOT_SUPPORTED_ON_NON_P2P_DEVICES */
               ? UVM_EUNSUPPORTED
               : UVM_EDRIVER;
}

/* CUpti_BuffersCallbackRequestFunc: a fresh 8-byte aligned buffer (records are "padded
 * and aligned to ensure that each member of the record is naturally aligned"); NULL when
 * out of memory, which the header allows ("CUPTI may drop activity records") */
static void on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
    if (!*buffer) {
        pthread_mutex_lock(&C.lock);
        C.buffer_failures++;
        pthread_mutex_unlock(&C.lock);
    }
}

/* CUpti_BuffersCallbackCompleteFunc: parse, keep the GPU page faults, free the buffer
 * (CUPTI "relinquished ownership of the buffer") */
static void on_complete(void *ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                        size_t valid) {
    (void)ctx, (void)stream_id, (void)size;
    void *rec = NULL;
    pthread_mutex_lock(&C.lock);
    C.buffers++;
    for (;;) {
        CUptiResult r = C.next_record(buffer, valid, &rec);
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
        if (r != CUPTI_SUCCESS) { /* INVALID_KIND: an incomplete or invalid record */
            C.bad_buffers++;
            break;
        }
        const um_record_head *h = rec;
        if (h->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) continue;
        C.records++;
        if (h->counterKind != CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT) {
            C.other_counters++;
            continue;
        }
        C.faults++;
        if (C.n == C.cap) {
            C.lost++;
            continue;
        }
        C.samples[C.n++] = (uvm_fault_sample){h->address, h->start, h->value, h->flags,
                                              h->srcId};
    }
    size_t d = 0;
    if (C.dropped && C.dropped(NULL, 0, &d) == CUPTI_SUCCESS) C.cupti_dropped = d;
    pthread_mutex_unlock(&C.lock);
    free(buffer);
}

#define SYM(field, name)                                                                       \
    do {                                                                                       \
        *(void **)&C.field = dlsym(C.lib, name);                                               \
        if (!C.field) {                                                                        \
            uvm_set_error("%s has no %s: not a CUPTI library", path, name);                    \
            return UVM_ENOBACKEND;                                                             \
        }                                                                                      \
    } while (0)

static int load(const char *path) {
    static const char *const names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
    const char *env = getenv("UVM_SCHED_LIBCUPTI");
    if (env && *env) path = env;
    if (path) {
        C.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; !C.lib && i < sizeof names / sizeof *names; i++)
            C.lib = dlopen(path = names[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (!C.lib) {
        const char *e = dlerror();
        uvm_set_error("CUPTI is not loadable (%s): %s; install it (pip install "
                      "nvidia-cuda-cupti-cu12, or the CUDA toolkit's extras/CUPTI) or name it "
                      "in UVM_SCHED_LIBCUPTI",
                      path ? path : "libcupti.so", e ? e : "not found");
        return UVM_ENOBACKEND;
    }
    SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
    SYM(configure, "cuptiActivityConfigureUnifiedMemoryCounter");
    SYM(enable, "cuptiActivityEnable");
    SYM(disable, "cuptiActivityDisable");
    SYM(next_record, "cuptiActivityGetNextRecord");
    SYM(flush_all, "cuptiActivityFlushAll");
    SYM(timestamp, "cuptiGetTimestamp");
    SYM(result_string, "cuptiGetResultString");
    *(void **)&C.dropped = dlsym(C.lib, "cuptiActivityGetNumDroppedRecords");
    return UVM_OK;
}

/* a library without the symbols is forgotten, not closed: dlclose has no pre-2.34 symbol
 * version bound in glibc_compat.h, and one mapping left behind costs nothing */
static void unload(void) { C.lib = NULL; }

int uvm_sched_cupti_start(const char *path, int device) {
    if (device < 0) {
        uvm_set_error("uvm_sched_cupti_start: device must be >= 0, got %d", device);
        return UVM_EINVAL;
    }
    if (C.on) return UVM_OK;
    /* "The API should be called after CUDA driver initialization" (cupti_activity.h,
     * cuptiActivityConfigureUnifiedMemoryCounter): start the backend first (cuInit) */
    pthread_mutex_lock(&uvm_g.lock);
    int ready = uvm_g.ready ? UVM_OK : uvm_start_locked();
    pthread_mutex_unlock(&uvm_g.lock);
    if (ready != UVM_OK) return ready;
    if (!C.lib) {
        int s = load(path);
        if (s != UVM_OK) {
            unload();
            return s;
        }
    }
    if (!C.samples) {
        uint64_t cap;
        int s = uvm_env_u64("UVM_SCHED_CUPTI_SAMPLES", 1u << 18, &cap);
        if (s != UVM_OK) return s;
        if (cap == 0 || cap > (1ull << 28)) {
            uvm_set_error("UVM_SCHED_CUPTI_SAMPLES=%llu: give a count in 1..256M",
                          (unsigned long long)cap);
            return UVM_EINVAL;
        }
        C.samples = calloc(cap, sizeof *C.samples);
        if (!C.samples) {
            uvm_set_error("no memory for %llu fault samples (%llu bytes)",
                          (unsigned long long)cap,
                          (unsigned long long)(cap * sizeof *C.samples));
            return UVM_ENOMEM;
        }
        C.cap = cap;
    }
    CUptiResult r = C.register_callbacks(on_request, on_complete);
    if (r != CUPTI_SUCCESS) return cupti_fail("cuptiActivityRegisterCallbacks", r);
    um_config cfg = {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
                     CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
                     (uint32_t)device, 1};
    r = C.configure(&cfg, 1);
    if (r != CUPTI_SUCCESS) return cupti_fail("cuptiActivityConfigureUnifiedMemoryCounter", r);
    r = C.enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
    if (r != CUPTI_SUCCESS) return cupti_fail("cuptiActivityEnable(UNIFIED_MEMORY_COUNTER)", r);
    C.on = 1;
    return UVM_OK;
}

int uvm_sched_cupti_flush(void) {
    if (!C.on) {
        uvm_set_error("uvm_sched_cupti_flush: fault sampling is not started");
        return UVM_EINVAL;
    }
    /* forced: records of faults still being processed come too (the warm-up is over) */
    CUptiResult r = C.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    return r == CUPTI_SUCCESS ? UVM_OK : cupti_fail("cuptiActivityFlushAll", r);
}

int uvm_sched_cupti_stop(void) {
    if (!C.on) return UVM_OK;
    int s = uvm_sched_cupti_flush();
    CUptiResult r = C.disable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
    C.on = 0;
    if (r != CUPTI_SUCCESS) return cupti_fail("cuptiActivityDisable(UNIFIED_MEMORY_COUNTER)", r);
    return s;
}

size_t uvm_sched_cupti_take(uvm_fault_sample *out, size_t max) {
    if (!out) return 0;
    pthread_mutex_lock(&C.lock);
    size_t k = C.n < max ? C.n : max;
    memcpy(out, C.samples, k * sizeof *out);
    memmove(C.samples, C.samples + k, (C.n - k) * sizeof *out);
    C.n -= k;
    pthread_mutex_unlock(&C.lock);
    return k;
}

int uvm_sched_cupti_clock(uint64_t *cupti_ns, uint64_t *mono_ns) {
    if (!cupti_ns || !mono_ns) {
        uvm_set_error("uvm_sched_cupti_clock: cupti_ns and mono_ns must not be NULL");
        return UVM_EINVAL;
    }
    if (!C.lib) {
        uvm_set_error("uvm_sched_cupti_clock: CUPTI is not loaded (uvm_sched_cupti_start)");
        return UVM_EINVAL;
    }
    uint64_t a = uvm_now_ns();
    CUptiResult r = C.timestamp(cupti_ns);
    uint64_t b = uvm_now_ns();
    if (r != CUPTI_SUCCESS) return cupti_fail("cuptiGetTimestamp", r);
    *mono_ns = a + (b - a) / 2;
    return UVM_OK;
}

/* name, value: one source for the names and the values */
#define CUPTI_STATS(X)                                                                         \
    X(cupti_on, (uint64_t)C.on)                                                                \
    X(cupti_records, C.records)                                                                \
    X(cupti_faults, C.faults)                                                                  \
    X(cupti_other_counters, C.other_counters)                                                  \
    X(cupti_pending, (uint64_t)C.n)                                                            \
    X(cupti_lost, C.lost)                                                                      \
    X(cupti_buffers, C.buffers)                                                                \
    X(cupti_buffer_failures, C.buffer_failures)                                                \
    X(cupti_bad_buffers, C.bad_buffers)                                                        \
    X(cupti_dropped, C.cupti_dropped)
#define CNAME(n, e) #n ","
static const char cupti_names[] = CUPTI_STATS(CNAME);

const char *uvm_sched_cupti_stats_names(void) { return cupti_names; }

size_t uvm_sched_cupti_stats(uint64_t *out, size_t n) {
#define CVAL(nm, e) (e),
    pthread_mutex_lock(&C.lock);
    uint64_t vals[] = {CUPTI_STATS(CVAL)};
    pthread_mutex_unlock(&C.lock);
    size_t k = sizeof vals / sizeof *vals;
    if (out) memcpy(out, vals, (n < k ? n : k) * sizeof *out);
    return k;
}

/* uvm_sched_reset: forget what was collected (CUPTI stays loaded and, if on, enabled) */
void uvm_cupti_reset(void) {
    pthread_mutex_lock(&C.lock);
    C.n = 0;
    C.records = C.faults = C.other_counters = C.lost = C.buffers = C.buffer_failures = 0;
    C.bad_buffers = C.cupti_dropped = 0;
    pthread_mutex_unlock(&C.lock);
}
