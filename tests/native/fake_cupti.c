/* A fake libcupti for the tests: the Unified Memory counter activity API, as strict as
 * cupti_activity.h (CUDA 13.0) documents it; tests/native/PRECONDITIONS_CUPTI.md lists
 * every refusal with the header text it comes from (ids U1..U9).
 *
 * Records are CUpti_ActivityUnifiedMemoryCounter3 (cupti_activity.h: the record of
 * CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER), written here field by field with the
 * header's layout (PACKED_ALIGNMENT: packed, 8-byte aligned; 104 bytes).  The test says
 * which faults happen (fake_cupti_fault: an address, a time on this fake's clock); they
 * are queued when the GPU page-fault counter is configured and the kind is enabled, and
 * delivered to the client's buffers at cuptiActivityFlushAll, as the real library does
 * with its own.  The clock (cuptiGetTimestamp) is CLOCK_MONOTONIC plus an offset the test
 * sets (fake_cupti_clock_offset), so a client that mixes up the two clocks is caught. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

typedef int CUptiResult;
enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_INVALID_OPERATION = 7,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_COMPATIBLE = 14,
    CUPTI_ERROR_INVALID_KIND = 21,
};
#define KIND_UM_COUNTER 25 /* CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER */
#define KIND_COUNT 55      /* CUPTI_ACTIVITY_KIND_COUNT (CUDA 13.0) */
#define COUNTER_KIND_COUNT 9 /* CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_COUNT */
#define SCOPE_COUNT 3        /* CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_COUNT */

/* CUpti_ActivityUnifiedMemoryCounterConfig */
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t scope, kind, deviceId, enable;
} um_config;

/* CUpti_ActivityUnifiedMemoryCounter3, cupti_activity.h (CUDA 13.0), in order */
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind;        /* CUpti_ActivityKind */
    uint32_t counterKind; /* CUpti_ActivityUnifiedMemoryCounterKind */
    uint64_t value, start, end, address;
    uint32_t srcId, dstId, streamId, processId, flags, pad;
    uint64_t processors[5];
} um_record;
_Static_assert(sizeof(um_record) == 104, "CUpti_ActivityUnifiedMemoryCounter3 is 104 bytes");

typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

#define MAX_PENDING 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    req_fn request;
    done_fn complete;
    int enabled;
    int counters[COUNTER_KIND_COUNT]; /* configured and enabled */
    int configured;
    int64_t clock_offset;
    um_record pending[MAX_PENDING];
    size_t n_pending;
    size_t dropped;
    int truncate_next; /* deliver the next buffer with its last record cut short */
    char log[1 << 16];
    size_t log_len;
    uint64_t seq;
} F;

static void logf_(const char *name, CUptiResult rc, const char *fmt, ...) {
    char args[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(args, sizeof args, fmt, ap);
        va_end(ap);
    }
    int k = snprintf(F.log + F.log_len, sizeof F.log - F.log_len, "%llu %s %s -> %d\n",
                     (unsigned long long)F.seq++, name, args, rc);
    if (k > 0 && F.log_len + (size_t)k < sizeof F.log) F.log_len += (size_t)k;
}

#define RET(name, rc, ...)                                                                     \
    do {                                                                                       \
        CUptiResult rc_ = (rc);                                                                \
        logf_(name, rc_, __VA_ARGS__);                                                         \
        pthread_mutex_unlock(&lock);                                                           \
        return rc_;                                                                            \
    } while (0)

API CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    static const char *const names[] = {
        [0] = "CUPTI_SUCCESS", [1] = "CUPTI_ERROR_INVALID_PARAMETER",
        [7] = "CUPTI_ERROR_INVALID_OPERATION", [12] = "CUPTI_ERROR_MAX_LIMIT_REACHED",
        [14] = "CUPTI_ERROR_NOT_COMPATIBLE", [21] = "CUPTI_ERROR_INVALID_KIND",
        [28] = "CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED"};
    if (!str || result < 0 || (size_t)result >= sizeof names / sizeof *names || !names[result])
        return CUPTI_ERROR_INVALID_PARAMETER;
    *str = names[result];
    return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityRegisterCallbacks(req_fn request, done_fn complete) {
    pthread_mutex_lock(&lock);
    if (!request || !complete) RET("cuptiActivityRegisterCallbacks", CUPTI_ERROR_INVALID_PARAMETER, NULL); /* U1 */
    F.request = request;
    F.complete = complete;
    RET("cuptiActivityRegisterCallbacks", CUPTI_SUCCESS, NULL);
}

API CUptiResult cuptiActivityConfigureUnifiedMemoryCounter(um_config *config, uint32_t count) {
    pthread_mutex_lock(&lock);
    if (!config || count == 0) RET("cuptiActivityConfigureUnifiedMemoryCounter", CUPTI_ERROR_INVALID_PARAMETER, "count=%u", count); /* U2 */
    for (uint32_t i = 0; i < count; i++)
        if (config[i].kind == 0 || config[i].kind >= COUNTER_KIND_COUNT ||
            config[i].scope >= SCOPE_COUNT)
            RET("cuptiActivityConfigureUnifiedMemoryCounter", CUPTI_ERROR_INVALID_PARAMETER,
                "kind=%u scope=%u", config[i].kind, config[i].scope); /* U2 */
    for (uint32_t i = 0; i < count; i++) F.counters[config[i].kind] = config[i].enable != 0;
    F.configured = 0;
    for (int k = 0; k < COUNTER_KIND_COUNT; k++) F.configured |= F.counters[k];
    RET("cuptiActivityConfigureUnifiedMemoryCounter", CUPTI_SUCCESS, "count=%u kind=%u enable=%u",
        count, config[0].kind, config[0].enable);
}

API CUptiResult cuptiActivityEnable(uint32_t kind) {
    pthread_mutex_lock(&lock);
    if (kind == 0 || kind >= KIND_COUNT) RET("cuptiActivityEnable", CUPTI_ERROR_INVALID_KIND, "kind=%u", kind); /* U3 */
    if (kind != KIND_UM_COUNTER) RET("cuptiActivityEnable", CUPTI_ERROR_INVALID_KIND, "kind=%u", kind); /* U3: not modelled */
    if (!F.configured) RET("cuptiActivityEnable", CUPTI_ERROR_NOT_COMPATIBLE, "kind=%u", kind); /* U4 */
    F.enabled = 1;
    RET("cuptiActivityEnable", CUPTI_SUCCESS, "kind=%u", kind);
}

API CUptiResult cuptiActivityDisable(uint32_t kind) {
    pthread_mutex_lock(&lock);
    if (kind == 0 || kind >= KIND_COUNT) RET("cuptiActivityDisable", CUPTI_ERROR_INVALID_KIND, "kind=%u", kind);
    if (kind == KIND_UM_COUNTER) F.enabled = 0;
    RET("cuptiActivityDisable", CUPTI_SUCCESS, "kind=%u", kind);
}

API CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER; /* U8 */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&lock);
    *timestamp = (uint64_t)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + F.clock_offset);
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER; /* U6 */
    size_t at = *record ? (size_t)((uint8_t *)*record - buffer) + sizeof(um_record) : 0;
    if (at >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    if (valid - at < sizeof(um_record)) return CUPTI_ERROR_INVALID_KIND; /* U7: incomplete */
    const um_record *r = (const um_record *)(buffer + at);
    if (r->kind != KIND_UM_COUNTER) return CUPTI_ERROR_INVALID_KIND; /* U7: invalid */
    *record = buffer + at;
    return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx, (void)stream;
    if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    *dropped = F.dropped;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* Deliver the pending records in client buffers.  Called without the lock (the client's
 * callbacks may call back into the library). */
API CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    pthread_mutex_lock(&lock);
    if (!F.request) RET("cuptiActivityFlushAll", CUPTI_ERROR_INVALID_OPERATION, "flag=%u", flag); /* U5 */
    logf_("cuptiActivityFlushAll", CUPTI_SUCCESS, "flag=%u pending=%zu", flag, F.n_pending);
    while (F.n_pending) {
        req_fn request = F.request;
        done_fn complete = F.complete;
        pthread_mutex_unlock(&lock);
        uint8_t *buf = NULL;
        size_t size = 0, max_records = 0;
        request(&buf, &size, &max_records);
        pthread_mutex_lock(&lock);
        if (!buf || size < sizeof(um_record) || ((uintptr_t)buf & 7)) {
            /* U9: a declined, too small or misaligned buffer: the records are dropped */
            logf_("buffer_refused", CUPTI_ERROR_INVALID_PARAMETER, "size=%zu aligned=%d", size,
                  buf ? !((uintptr_t)buf & 7) : 0);
            F.dropped += F.n_pending;
            F.n_pending = 0;
            pthread_mutex_unlock(&lock);
            if (buf) complete(NULL, 0, buf, size, 0); /* given back, empty */
            return CUPTI_SUCCESS;
        }
        size_t k = size / sizeof(um_record);
        if (max_records && max_records < k) k = max_records;
        if (k > F.n_pending) k = F.n_pending;
        memcpy(buf, F.pending, k * sizeof(um_record));
        memmove(F.pending, F.pending + k, (F.n_pending - k) * sizeof(um_record));
        F.n_pending -= k;
        size_t valid = k * sizeof(um_record);
        if (F.truncate_next) {
            F.truncate_next = 0;
            valid -= sizeof(um_record) / 2;
        }
        pthread_mutex_unlock(&lock);
        complete(NULL, 0, buf, size, valid);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* ---- test controls ------------------------------------------------------------------------ */
/* A unified-memory counter event of counterKind at address and time t (this fake's clock):
 * queued (1) when that counter is configured and the kind enabled, else not seen (0). */
API int fake_cupti_counter(uint32_t counter_kind, uint64_t address, uint64_t t, uint64_t value,
                           uint32_t flags, uint32_t device) {
    pthread_mutex_lock(&lock);
    int ok = F.enabled && counter_kind < COUNTER_KIND_COUNT && F.counters[counter_kind];
    if (ok && F.n_pending == MAX_PENDING) {
        F.dropped++;
        ok = 0;
    } else if (ok) {
        um_record r;
        memset(&r, 0, sizeof r);
        r.kind = KIND_UM_COUNTER;
        r.counterKind = counter_kind;
        r.value = value;
        r.start = t;
        r.end = t + 1000;
        r.address = address;
        r.srcId = device;
        r.flags = flags;
        r.processId = 1;
        F.pending[F.n_pending++] = r;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

/* A GPU page fault (counterKind 4) at address, time t; flags: the access type. */
API int fake_cupti_fault(uint64_t address, uint64_t t, uint32_t flags, uint32_t device) {
    return fake_cupti_counter(4, address, t, 1, flags, device);
}

API void fake_cupti_clock_offset(int64_t ns) {
    pthread_mutex_lock(&lock);
    F.clock_offset = ns;
    pthread_mutex_unlock(&lock);
}

API void fake_cupti_truncate_next(void) {
    pthread_mutex_lock(&lock);
    F.truncate_next = 1;
    pthread_mutex_unlock(&lock);
}

API int fake_cupti_record_size(void) { return (int)sizeof(um_record); }

API const char *fake_cupti_log(void) { return F.log; }

API void fake_cupti_reset(void) {
    pthread_mutex_lock(&lock);
    memset(&F, 0, sizeof F);
    pthread_mutex_unlock(&lock);
}
