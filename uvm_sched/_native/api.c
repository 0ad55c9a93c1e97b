/* The exported ABI: one global lock around pool, executor and ring production; backend
 * selection; stats; drain (the direct calls are in api_direct.c). Nothing here aborts:
 * every entry returns a status (or NULL for the PyTorch ABI) and leaves the pool as it was
 * on failure. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

uvm_state uvm_g = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char last_error[320];
static int verbose = 1;
static _Atomic uint64_t logged;

void uvm_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

/* Messages kept for Python's logging once uvm_sched.native has asked for them
 * (uvm_sched_log_capture(1)); it takes them with uvm_sched_take_log.  Python is not called
 * back from here: the caller may hold uvm_g.lock while a thread holding the GIL waits for
 * it.  A fixed buffer (no allocation; its own lock, held only to copy): a message that
 * does not fit until the next take is counted in log_dropped. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[4096];
static size_t log_len;
static uint64_t log_dropped;
static _Atomic int log_capture;

static void log_line(const char *msg) {
    if (!atomic_load(&log_capture)) {
        fprintf(stderr, "uvm_sched: %s\n", msg);
        return;
    }
    size_t n = strlen(msg);
    pthread_mutex_lock(&log_lock);
    if (log_len + n + 1 < sizeof log_buf) {
        memcpy(log_buf + log_len, msg, n);
        log_len += n;
        log_buf[log_len++] = '\n';
    } else {
        log_dropped++;
    }
    pthread_mutex_unlock(&log_lock);
}

/* Errors that reach the PyTorch ABI have no caller to report them, so they are logged (to
 * stderr, or to Python's logging, see above): the first 20, then only counted
 * (UVM_SCHED_VERBOSE=0 silences, 2 logs all). */
void uvm_log(const char *fmt, ...) {
    if (verbose <= 0) return;
    uint64_t n = atomic_fetch_add(&logged, 1);
    if (verbose < 2 && n >= 20) {
        if (n == 20) log_line("further errors are counted in stats, not logged");
        return;
    }
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line(msg);
}

int uvm_sched_log_capture(int on) { return atomic_exchange(&log_capture, on ? 1 : 0); }

size_t uvm_sched_take_log(char *buf, size_t cap, uint64_t *dropped) {
    pthread_mutex_lock(&log_lock);
    size_t n = log_len < cap ? log_len : (cap ? cap - 1 : 0);
    if (cap) {
        memcpy(buf, log_buf, n);
        buf[n] = '\0';
    }
    memmove(log_buf, log_buf + n, log_len - n);
    log_len -= n;
    if (dropped) *dropped = log_dropped;
    log_dropped = 0;
    pthread_mutex_unlock(&log_lock);
    return n;
}

const char *uvm_sched_last_error(void) { return last_error; }

/* fork (e.g. a PyTorch DataLoader worker) while another thread holds a lock would leave
 * the child's copy locked forever: hold both locks across fork, release them on each side */
static void fork_prepare(void) {
    pthread_mutex_lock(&uvm_g.lock);
    pthread_mutex_lock(&drain_lock);
    pthread_mutex_lock(&log_lock);
}
static void fork_release(void) {
    pthread_mutex_unlock(&log_lock);
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&uvm_g.lock);
}
__attribute__((constructor)) static void register_fork_handlers(void) {
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

int uvm_sched_abi_version(void) { return UVM_SCHED_ABI_VERSION; }

/* Settings from the environment, read strictly: a value that does not parse is an error
 * naming the variable, the value and an accepted example, never a silent 0 or 1 (strtoull
 * made "1.5G" one byte, "32 M" 32 bytes and "abc" 0).  A byte count is a whole decimal
 * number (or 0x hex) with an optional binary unit K/M/G/T, optionally followed by "iB"/"B". */
static int env_u64(const char *name, uint64_t dflt, uint64_t *out) {
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v) return UVM_OK;
    const char *p = v;
    int base = 10;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    int digits = 0;
    for (const char *q = p; *q && (base == 16 ? isxdigit((unsigned char)*q)
                                              : isdigit((unsigned char)*q)); q++)
        digits++;
    errno = 0;
    char *end = (char *)p + digits;
    unsigned long long x = digits ? strtoull(p, NULL, base) : 0;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'b' || end[1] == 'B')) end += 2;
    else if (end[0] == 'b' || end[0] == 'B') end++;
    if (!digits || *end || errno == ERANGE || (shift && x > (UINT64_MAX >> shift))) {
        uvm_set_error("%s=\"%.40s\" is not a count: give a whole number with an optional "
                      "K/M/G/T unit, e.g. %s=512M", name, v, name);
        return UVM_EINVAL;
    }
    *out = (uint64_t)x << shift;
    return UVM_OK;
}

int uvm_env_u64(const char *name, uint64_t dflt, uint64_t *out) { return env_u64(name, dflt, out); }

static int env_bool(const char *name, int dflt, int *out) {
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v) return UVM_OK;
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, on[i])) return *out = 1, UVM_OK;
        if (!strcasecmp(v, off[i])) return *out = 0, UVM_OK;
    }
    uvm_set_error("%s=\"%.40s\" is not on or off: give 1 or 0 (true/false, yes/no, on/off), "
                  "e.g. %s=0", name, v, name);
    return UVM_EINVAL;
}

/* lock held */
static int do_init(const char *backend) {
    /* every setting is read (and refused) before anything is started */
    uint64_t verb, arena, limit, ring;
    int tracing;
    if (env_u64("UVM_SCHED_VERBOSE", 1, &verb) != UVM_OK ||
        env_u64("UVM_SCHED_ARENA_BYTES", (uint64_t)1 << 30, &arena) != UVM_OK ||
        env_u64("UVM_SCHED_LIMIT_BYTES", UINT64_MAX, &limit) != UVM_OK ||
        env_u64("UVM_SCHED_RING_EVENTS", (uint64_t)1 << 20, &ring) != UVM_OK ||
        env_bool("UVM_SCHED_TRACE", 1, &tracing) != UVM_OK)
        return UVM_EINVAL;
    if (verb > 2) {
        uvm_set_error("UVM_SCHED_VERBOSE=\"%s\" is not 0, 1 or 2: e.g. UVM_SCHED_VERBOSE=0",
                      getenv("UVM_SCHED_VERBOSE"));
        return UVM_EINVAL;
    }
    if (!backend || !*backend) backend = getenv("UVM_SCHED_BACKEND");
    if (!backend || !*backend) backend = "auto";
    const uvm_prim *prim = NULL;
    char why[256] = "";
    if (!strcasecmp(backend, "host")) {
        prim = &uvm_prim_host;
        snprintf(uvm_g.backend_reason, sizeof uvm_g.backend_reason, "host emulation requested");
    } else if (!strcasecmp(backend, "cuda") || !strcasecmp(backend, "auto")) {
        if (uvm_prim_cuda_load(&prim, why, sizeof why) == UVM_OK) {
            snprintf(uvm_g.backend_reason, sizeof uvm_g.backend_reason, "%s", why);
        } else if (!strcasecmp(backend, "auto")) {
            prim = &uvm_prim_host;
            snprintf(uvm_g.backend_reason, sizeof uvm_g.backend_reason,
                     "host emulation (auto: %s)", why);
        } else {
            snprintf(uvm_g.backend_reason, sizeof uvm_g.backend_reason, "%s", why);
            uvm_set_error("backend cuda unavailable: %s", why);
            return UVM_ENOBACKEND;
        }
    } else {
        uvm_set_error("unknown backend \"%s\" (auto, cuda or host)", backend);
        return UVM_EINVAL;
    }
    verbose = (int)verb;
    int s = uvm_pool_init(&uvm_g.pool, prim);
    if (s != UVM_OK) {
        uvm_pool_fini(&uvm_g.pool);
        return s;
    }
    uvm_g.pool.arena_bytes = arena;
    uvm_g.pool.arena_bytes = (uvm_g.pool.arena_bytes + UVM_PAGE - 1) & ~(UVM_PAGE - 1);
    if (uvm_g.pool.arena_bytes == 0) uvm_g.pool.arena_bytes = UVM_PAGE;
    uvm_g.pool.limit_bytes = limit;
    s = uvm_ring_init(&uvm_g.ring, ring);
    if (s != UVM_OK) {
        uvm_pool_fini(&uvm_g.pool);
        return s;
    }
    uvm_exec_init(&uvm_g.exec, prim);
    memset(&uvm_g.direct, 0, sizeof uvm_g.direct);
    uvm_g.tracing = tracing != 0;
    uvm_g.prim = prim;
    uvm_g.tick = 0;
    uvm_g.marks = 0;
    uvm_g.ready = true;
    return UVM_OK;
}

int uvm_start_locked(void) { return uvm_g.ready ? UVM_OK : do_init(NULL); }

int uvm_sched_init(const char *backend) {
    pthread_mutex_lock(&uvm_g.lock);
    int s = UVM_OK;
    if (!uvm_g.ready) {
        s = do_init(backend);
    } else if (backend && *backend && strcasecmp(backend, "auto") &&
               strcasecmp(backend, uvm_g.prim->name)) {
        uvm_set_error("backend %s is already in use; cannot switch to %s", uvm_g.prim->name,
                      backend);
        s = UVM_EINVAL;
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_reset(const char *backend, int force) {
    pthread_mutex_lock(&uvm_g.lock);
    pthread_mutex_lock(&drain_lock);
    if (uvm_g.ready && uvm_g.pool.st.allocated_blocks && !force) {
        uvm_set_error("%llu blocks (%llu bytes) are still allocated",
                      (unsigned long long)uvm_g.pool.st.allocated_blocks,
                      (unsigned long long)uvm_g.pool.st.allocated_bytes);
        pthread_mutex_unlock(&drain_lock);
        pthread_mutex_unlock(&uvm_g.lock);
        return UVM_EBUSY;
    }
    if (uvm_g.ready) {
        uvm_exec_fini(&uvm_g.exec);
        uvm_probe_reset();
        uvm_pool_fini(&uvm_g.pool);
        uvm_ring_fini(&uvm_g.ring);
        uvm_g.prim->shutdown();
        uvm_g.ready = false;
    }
    uvm_cupti_reset();
    int s = do_init(backend);
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

const char *uvm_sched_backend_name(void) {
    pthread_mutex_lock(&uvm_g.lock);
    if (!uvm_g.ready) do_init(NULL);
    const char *n = uvm_g.ready ? uvm_g.prim->name : "none";
    pthread_mutex_unlock(&uvm_g.lock);
    return n;
}

const char *uvm_sched_backend_reason(void) { return uvm_g.backend_reason; }

int uvm_sched_malloc_status(size_t size, int device, void *stream, void **out) {
    if (UVM_UNLIKELY(!out)) {
        uvm_set_error("uvm_sched_malloc_status: out is NULL (pass where to store the address)");
        return UVM_EINVAL;
    }
    *out = NULL;
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    if (UVM_UNLIKELY(size == 0)) {
        uvm_g.pool.st.n_zero_size++;
        pthread_mutex_unlock(&uvm_g.lock);
        return UVM_OK;
    }
    uvm_block b;
    int s = uvm_pool_malloc(&uvm_g.pool, size, device, stream, &b);
    UVM_POOL_DEBUG_CHECK(&uvm_g.pool, "malloc");
    if (UVM_LIKELY(s == UVM_OK)) {
        uvm_trace(UVM_EV_ALLOC, (uint64_t)(uintptr_t)b.addr, size, (uint64_t)(uintptr_t)stream,
                  device, (int64_t)b.ordinal);
        if (uvm_g.exec.armed) uvm_exec_on_event(&uvm_g.exec, UVM_EV_ALLOC, &b, stream);
        uvm_probe_on_event(stream, &b);
        uvm_g.tick++;
        *out = b.addr;
    } else {
        uvm_g.pool.st.n_oom++;
        uvm_g.pool.st.last_oom_size = size;
        uvm_trace(UVM_EV_OOM, 0, size, (uint64_t)(uintptr_t)stream, device, s);
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_free_status(void *ptr, size_t size, int device, void *stream, int own_stream) {
    if (!ptr) return UVM_OK;
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    uvm_block b;
    int s = uvm_pool_free(&uvm_g.pool, ptr, size, device, stream, own_stream, &b);
    UVM_POOL_DEBUG_CHECK(&uvm_g.pool, "free");
    if (UVM_LIKELY(s == UVM_OK)) {
        void *st = own_stream ? uvm_pool_stream_handle(&uvm_g.pool, b.stream) : stream;
        uvm_trace(UVM_EV_FREE, (uint64_t)(uintptr_t)ptr, b.req, (uint64_t)(uintptr_t)st,
                  b.device, (int64_t)b.ordinal);
        if (uvm_g.exec.armed) uvm_exec_on_event(&uvm_g.exec, UVM_EV_FREE, &b, st);
        uvm_probe_on_event(st, NULL);
        uvm_g.tick++;
    } else {
        int kind = s == UVM_EDOUBLEFREE ? UVM_EV_DOUBLE_FREE
                   : s == UVM_ESIZE     ? UVM_EV_SIZE_MISMATCH
                   : s == UVM_EDRIVER   ? UVM_EV_DRIVER_ERROR
                                        : UVM_EV_BAD_FREE;
        uvm_trace(kind, (uint64_t)(uintptr_t)ptr, size == UVM_SIZE_ANY ? 0 : size,
                  (uint64_t)(uintptr_t)stream, device,
                  s == UVM_ESIZE ? (int64_t)b.req : s);
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

void *uvm_sched_malloc(size_t size, int device, void *stream) {
    void *p = NULL;
    int s = uvm_sched_malloc_status(size, device, stream, &p);
    if (s != UVM_OK) uvm_log("malloc of %zu bytes failed: %s", size, last_error);
    return p;
}

void uvm_sched_free(void *ptr, size_t size, int device, void *stream) {
    int s = uvm_sched_free_status(ptr, size, device, stream, 0);
    if (s != UVM_OK) uvm_log("%s", last_error);
}

int uvm_sched_block_info(void *ptr, uint64_t *size, uint64_t *ordinal, uint64_t *stream) {
    if (!size || !ordinal || !stream) {
        uvm_set_error("uvm_sched_block_info: size, ordinal and stream must not be NULL");
        return UVM_EINVAL;
    }
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    uvm_block b;
    int s = uvm_pool_lookup(&uvm_g.pool, ptr, &b);
    if (s == UVM_OK) {
        *size = b.req;
        *ordinal = b.ordinal;
        *stream = (uint64_t)(uintptr_t)uvm_pool_stream_handle(&uvm_g.pool, b.stream);
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_block_ordinals(const uint64_t *ptrs, size_t n, uint64_t *ordinals) {
    if (n && (!ptrs || !ordinals)) {
        uvm_set_error("uvm_sched_block_ordinals: %s is NULL but n is %zu",
                      !ptrs ? "ptrs" : "ordinals", n);
        return UVM_EINVAL;
    }
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    for (size_t i = 0; i < n; i++) {
        uvm_block b;
        ordinals[i] = uvm_pool_lookup(&uvm_g.pool, (void *)(uintptr_t)ptrs[i], &b) == UVM_OK
                          ? b.ordinal : UINT64_MAX;
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return UVM_OK;
}

int uvm_sched_step(void) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    uvm_trace(UVM_EV_MARK, 0, 0, 0, 0, (int64_t)uvm_g.marks);
    uvm_g.marks++;
    uvm_exec_on_mark(&uvm_g.exec);
    uvm_probe_on_mark();
    pthread_mutex_unlock(&uvm_g.lock);
    return UVM_OK;
}

int64_t uvm_sched_release_cached(void) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    uint64_t errs = uvm_g.pool.st.err_driver, held = uvm_g.pool.st.reserved_bytes;
    uint64_t n = uvm_pool_release_cached(&uvm_g.pool);
    UVM_POOL_DEBUG_CHECK(&uvm_g.pool, "release_cached");
    uvm_g.direct.releases++;
    uvm_trace(UVM_EV_RELEASE, 0, n, 0, 0, 0);
    if (uvm_g.pool.st.err_driver != errs) {
        /* say what happened: some bytes went back, the rest the driver still holds */
        char why[sizeof last_error];
        snprintf(why, sizeof why, "%s", last_error);
        uvm_set_error("released %llu of %llu reserved bytes; freeing the rest failed (%s): "
                      "the driver still holds %llu bytes", (unsigned long long)n,
                      (unsigned long long)held, why,
                      (unsigned long long)uvm_g.pool.st.reserved_bytes);
        pthread_mutex_unlock(&uvm_g.lock);
        return UVM_EDRIVER;
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return (int64_t)n;
}

int uvm_sched_check_pool(int full) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    char why[256] = "";
    int s = uvm_pool_is_valid(&uvm_g.pool, full != 0, why, sizeof why) ? UVM_OK : UVM_EINVAL;
    if (s != UVM_OK) uvm_set_error("pool invariant broken: %s", why);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_set_tracing(int on) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int old = uvm_g.tracing;
    uvm_g.tracing = on != 0;
    pthread_mutex_unlock(&uvm_g.lock);
    return old;
}

/* name, expression: the stats table (one source for names and values) */
#define UVM_STATS(X)                                                                           \
    X(allocated_bytes, P.allocated_bytes)                                                      \
    X(allocated_blocks, P.allocated_blocks)                                                    \
    X(peak_allocated_bytes, P.peak_allocated_bytes)                                            \
    X(reserved_bytes, P.reserved_bytes)                                                        \
    X(peak_reserved_bytes, P.peak_reserved_bytes)                                              \
    X(in_use_bytes, P.in_use_bytes)                                                            \
    X(limit_bytes, uvm_g.pool.limit_bytes)                                                     \
    X(arena_bytes, uvm_g.pool.arena_bytes)                                                     \
    X(arenas, P.arenas)                                                                        \
    X(slabs, P.slabs)                                                                          \
    X(n_malloc, P.n_malloc)                                                                    \
    X(n_free, P.n_free)                                                                        \
    X(n_oom, P.n_oom)                                                                          \
    X(n_zero_size, P.n_zero_size)                                                              \
    X(last_oom_size, P.last_oom_size)                                                          \
    X(errors_unknown_pointer, P.err_unknown)                                                   \
    X(errors_double_free, P.err_double_free)                                                   \
    X(errors_size_mismatch, P.err_size)                                                        \
    X(errors_driver, P.err_driver)                                                             \
    X(cross_stream_frees, P.cross_stream_frees)                                                \
    X(reclaims, P.reclaims)                                                                    \
    X(arenas_released, P.arenas_released)                                                      \
    X(bytes_released, P.bytes_released)                                                        \
    X(ticks, uvm_g.tick)                                                                       \
    X(marks, uvm_g.marks)                                                                      \
    X(tracing, (uint64_t)uvm_g.tracing)                                                        \
    X(events_recorded, uvm_g.ring.recorded)                                                    \
    X(events_dropped, uvm_g.ring.dropped)                                                      \
    X(ring_capacity, uvm_g.ring.cap)                                                           \
    X(plan_armed, E.armed)                                                                     \
    X(plans_armed, E.arms)                                                                     \
    X(actions_issued, E.actions_issued)                                                        \
    X(actions_skipped, E.actions_skipped)                                                      \
    X(actions_failed, E.actions_failed)                                                        \
    X(actions_unsupported, E.actions_unsupported)                                              \
    X(divergences, E.divergences)                                                              \
    X(iterations, E.iterations)                                                                \
    X(resyncs, E.resyncs)                                                                      \
    X(insertions, E.insertions)                                                                \
    X(insertions_planned, E.insertions_planned)                                                \
    X(insertion_mismatches, E.insertion_mismatches)                                            \
    X(bytes_prefetched_h2d, E.bytes_h2d)                                                       \
    X(bytes_prefetched_d2h, E.bytes_d2h)                                                       \
    X(bytes_discarded, E.bytes_discarded)                                                      \
    X(bytes_advised, E.bytes_advised)                                                          \
    X(direct_prefetches, D.prefetches)                                                         \
    X(direct_advises, D.advises)                                                               \
    X(direct_discards, D.discards)                                                             \
    X(direct_syncs, D.syncs)                                                                   \
    X(direct_releases, D.releases)                                                             \
    X(direct_failed, D.failed)                                                                 \
    X(direct_unsupported, D.unsupported)                                                       \
    X(direct_bytes_h2d, D.bytes_h2d)                                                           \
    X(direct_bytes_d2h, D.bytes_d2h)                                                           \
    X(direct_bytes_discarded, D.bytes_discarded)                                               \
    X(direct_bytes_advised, D.bytes_advised)

#define NAME(n, e) #n ","
static const char stats_names[] = UVM_STATS(NAME);

const char *uvm_sched_stats_names(void) { return stats_names; }

size_t uvm_sched_stats(uint64_t *out, size_t n) {
    pthread_mutex_lock(&uvm_g.lock);
    if (!uvm_g.ready) do_init(NULL);
    const uvm_pool_stats P = uvm_g.pool.st;
    const uvm_exec_stats E = uvm_g.exec.st;
    const uvm_direct_stats D = uvm_g.direct;
    uint64_t v[] = {
#define VALUE(n, e) (uint64_t)(e),
        UVM_STATS(VALUE)
#undef VALUE
    };
    pthread_mutex_unlock(&uvm_g.lock);
    size_t m = sizeof v / sizeof v[0];
    if (n > m) n = m;
    if (out) memcpy(out, v, n * sizeof *out); /* NULL: only the count is asked for */
    return m;
}

size_t uvm_sched_ring_pending(void) {
    uvm_ring *r = &uvm_g.ring;
    return (size_t)(atomic_load_explicit(&r->head, memory_order_acquire) -
                    atomic_load_explicit(&r->tail, memory_order_relaxed));
}

size_t uvm_sched_drain(uvm_event *out, size_t max) {
    if (!out) return 0; /* nowhere to copy: nothing is taken from the ring */
    pthread_mutex_lock(&drain_lock);
    uvm_ring *r = &uvm_g.ring;
    if (!r->buf) {
        pthread_mutex_unlock(&drain_lock);
        return 0;
    }
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t n = head - tail;
    if (n > max) n = max;
    for (uint64_t done = 0; done < n;) {
        uint64_t at = (tail + done) & r->mask;
        uint64_t chunk = r->cap - at;
        if (chunk > n - done) chunk = n - done;
        memcpy(out + done, r->buf + at, chunk * sizeof *out);
        done += chunk;
    }
    atomic_store_explicit(&r->tail, tail + n, memory_order_release);
    pthread_mutex_unlock(&drain_lock);
    return (size_t)n;
}

/* The tables' pointers, and a period the executor can hold (its per-event index is
 * allocated up front: 2^29 events cost 4.2 GB before failing); = MAX_PERIOD_EVENTS in
 * uvm_sched/planner/_plan.py. */
#define UVM_MAX_PERIOD_EVENTS ((uint64_t)1 << 24)
static int arm_args_ok(const uvm_plan_row *rows, size_t n_rows, const uint64_t *alloc_sizes,
                       size_t n_allocs, uint64_t period_events) {
    if ((n_rows && !rows) || (n_allocs && !alloc_sizes)) {
        uvm_set_error("arming: %s is NULL but its count is %zu", n_rows && !rows ? "rows"
                      : "alloc_sizes", n_rows && !rows ? n_rows : n_allocs);
        return UVM_EINVAL;
    }
    if (period_events > UVM_MAX_PERIOD_EVENTS) {
        uvm_set_error("period_events must be in 1..%llu allocator events, got %llu",
                      (unsigned long long)UVM_MAX_PERIOD_EVENTS, (unsigned long long)period_events);
        return UVM_EINVAL;
    }
    return UVM_OK;
}

int uvm_sched_exec_arm(const uvm_plan_row *rows, size_t n_rows, const uint64_t *alloc_sizes,
                       size_t n_allocs, uint64_t period_events, int sync, int device,
                       int start_now) {
    if (arm_args_ok(rows, n_rows, alloc_sizes, n_allocs, period_events) != UVM_OK)
        return UVM_EINVAL;
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int s = uvm_exec_arm(&uvm_g.exec, rows, n_rows, alloc_sizes, n_allocs, period_events, sync,
                         device, start_now);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}


int uvm_sched_exec_arm_at(const uvm_plan_row *rows, size_t n_rows, const uint64_t *alloc_sizes,
                          size_t n_allocs, uint64_t period_events, int sync, int device,
                          int start_now, uint64_t phase, const uint64_t *phase_addrs,
                          size_t n_phase_addrs) {
    if (arm_args_ok(rows, n_rows, alloc_sizes, n_allocs, period_events) != UVM_OK)
        return UVM_EINVAL;
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int s = uvm_exec_arm_at(&uvm_g.exec, rows, n_rows, alloc_sizes, n_allocs, period_events,
                            sync, device, start_now, phase, phase_addrs, n_phase_addrs);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_exec_set_insertion(const uvm_plan_row *rows, size_t n_rows,
                                  const uint64_t *alloc_sizes, size_t n_allocs, uint64_t events,
                                  uint64_t at) {
    if (arm_args_ok(rows, n_rows, alloc_sizes, n_allocs, events) != UVM_OK) return UVM_EINVAL;
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int s = uvm_exec_set_insertion(&uvm_g.exec, rows, n_rows, alloc_sizes, n_allocs, events, at);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_exec_disarm(void) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    uvm_exec_disarm(&uvm_g.exec);
    pthread_mutex_unlock(&uvm_g.lock);
    return UVM_OK;
}
