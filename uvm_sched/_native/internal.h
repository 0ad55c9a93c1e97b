/* Internal declarations of the native core: uvm_-prefixed, hidden (only uvm_sched.h's
 * uvm_sched_* functions are exported). */
#ifndef UVM_SCHED_INTERNAL_H
#define UVM_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "uvm_sched.h"

#define UVM_HIDDEN __attribute__((visibility("hidden")))
#define UVM_LIKELY(x) __builtin_expect(!!(x), 1)
#define UVM_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- prim: every driver call goes through this table -------------------------------
 * Pre-conditions are documented per entry; each returns UVM_OK or a UVM_E* status and,
 * on a driver failure, leaves a message naming the call and the driver's code in the
 * thread's last error. */
enum uvm_advice {
    UVM_ADV_PREFERRED_HOST, UVM_ADV_ACCESSED_BY, UVM_ADV_READ_MOSTLY,
    /* the unset forms (direct calls only: a plan never unsets) */
    UVM_ADV_UNSET_PREFERRED, UVM_ADV_UNSET_ACCESSED_BY, UVM_ADV_UNSET_READ_MOSTLY
};

typedef struct uvm_prim {
    const char *name;
    /* reserve bytes (multiple of 2 MiB) of managed memory; *out 2 MiB aligned is NOT
     * required (the pool aligns). */
    int (*alloc_managed)(int device, size_t bytes, void **out);
    int (*free_managed)(void *p, size_t bytes);
    /* asynchronous migration of [p, p+bytes) to the device or to the host on stream */
    int (*prefetch)(int device, void *p, size_t bytes, int to_host, void *stream);
    int (*advise)(int device, void *p, size_t bytes, int advice);
    /* drop the contents of [p, p+bytes) (stream-ordered); UVM_EUNSUPPORTED if absent */
    int (*discard)(int device, void *p, size_t bytes, void *stream);
    int (*stream_create)(int device, void **out);
    int (*stream_destroy)(void *stream);
    int (*event_create)(int device, void **out);
    int (*event_destroy)(void *ev);
    int (*event_record)(void *ev, void *stream);
    int (*stream_wait_event)(void *stream, void *ev);
    /* UVM_OK when the work before the record is done, 1 when not yet */
    int (*event_query)(void *ev);
    int (*event_sync)(void *ev);
    /* wait until the device has done all work queued so far in its primary context,
     * the work of streams the application has since destroyed included */
    int (*device_sync)(int device);
    /* 1 when stream (of device) is capturing a CUDA graph, 0 when not, < 0 on error */
    int (*stream_capturing)(int device, void *stream);
    /* called when the library is torn down (uvm_sched_reset): drop what the backend made
     * for itself (prim_cuda.c: its discard streams and events) */
    void (*shutdown)(void);
    /* ---- for the calibration probe (calib.c); NULL where there is no device (host) ----
     * an event that records time (event_create's do not); destroy, record and sync it as
     * any event */
    int (*timer_create)(int device, void **out);
    /* seconds from a's completion to b's, both recorded and waited for */
    int (*elapsed_s)(void *a, void *b, double *out);
    /* the device writes bytes of [p, p+bytes) (cuMemsetD8Async), on stream */
    int (*memset_async)(int device, void *p, size_t bytes, void *stream);
    /* the device copies bytes from src to dst (cuMemcpyDtoDAsync), on stream */
    int (*copy_async)(int device, void *dst, const void *src, size_t bytes, void *stream);
    /* device memory free and total, bytes */
    int (*mem_info)(int device, uint64_t *free_bytes, uint64_t *total_bytes);
    int (*device_name)(int device, char *buf, size_t len);
} uvm_prim;

UVM_HIDDEN extern const uvm_prim uvm_prim_host;
/* Load the driver (dlopen $UVM_SCHED_LIBCUDA or libcuda.so.1); fills why on failure. */
UVM_HIDDEN int uvm_prim_cuda_load(const uvm_prim **out, char *why, size_t why_len);
/* The first driver call the calibration probe needs that the loaded driver lacks (they
 * are optional: the allocator works without them), NULL when it has them all. */
UVM_HIDDEN const char *uvm_prim_cuda_missing(void);

/* ---- errors ---------------------------------------------------------------------------- */
UVM_HIDDEN void uvm_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
UVM_HIDDEN void uvm_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- ring ---------------------------------------------------------------------------------
 * Single producer at a time (the producer holds the global lock), one consumer (drain, under
 * its own lock).  A full ring drops the new record and counts it: the hot path never waits. */
typedef struct uvm_ring {
    uvm_event *buf;
    uint64_t cap;  /* power of two */
    uint64_t mask;
    _Atomic uint64_t head; /* next write; written by the producer only */
    _Atomic uint64_t tail; /* next read; written by the consumer only */
    uint64_t dropped;      /* records lost to a full ring (producer side) */
    uint64_t recorded;
} uvm_ring;

UVM_HIDDEN int uvm_ring_init(uvm_ring *r, uint64_t cap);
UVM_HIDDEN void uvm_ring_fini(uvm_ring *r);

static inline uint64_t uvm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void uvm_ring_push(uvm_ring *r, uint64_t tick, int32_t kind, uint64_t addr,
                                 uint64_t size, uint64_t stream, int32_t device, int64_t arg) {
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (UVM_UNLIKELY(h - atomic_load_explicit(&r->tail, memory_order_acquire) >= r->cap)) {
        r->dropped++;
        return;
    }
    uvm_event *e = &r->buf[h & r->mask];
    /* the ring is far bigger than the caches: ask for the line a few records ahead now,
     * so the write after next does not wait for it */
    __builtin_prefetch(&r->buf[(h + 4) & r->mask], 1, 0);
    e->tick = tick;
    e->t_ns = uvm_now_ns();
    e->addr = addr;
    e->size = size;
    e->stream = stream;
    e->arg = arg;
    e->kind = kind;
    e->device = device;
    r->recorded++;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

/* ---- pool ------------------------------------------------------------------------------- */
#define UVM_PAGE_SHIFT 21
#define UVM_PAGE ((uint64_t)1 << UVM_PAGE_SHIFT) /* the driver's VA block: 2 MiB */
#define UVM_SMALL_MAX ((uint64_t)1 << 20)        /* larger requests get whole pages */
#define UVM_MIN_ALIGN 512
#define UVM_NCLASSES 40
#define UVM_MAX_STREAMS 128
#define UVM_MAX_DEVICES 64
#define UVM_NBINS 256

struct uvm_arena;
struct uvm_slab;

/* A run of whole pages inside an arena: free, one large block, or a slab of small ones. */
enum { RUN_FREE = 0, RUN_LARGE = 1, RUN_SLAB = 2 };

typedef struct uvm_run {
    struct uvm_arena *arena;
    uint64_t first; /* first page index in the arena */
    uint64_t npages;
    int state;
    int stream; /* owner stream slot; 0 = untagged (usable by any stream) */
    struct uvm_run *prev, *next; /* bin list (free) or slab list link */
    uint64_t req;     /* LARGE: requested bytes */
    uint64_t ordinal; /* LARGE: global alloc ordinal */
    struct uvm_slab *slab;
} uvm_run;

typedef struct uvm_slab {
    uvm_run *run;
    struct uvm_slab *prev, *next; /* partial list of (stream, class) */
    uint32_t cls, csize, nslots, nfree, hint;
    int stream;
    bool in_list;
    uint64_t used[64];   /* bitmap of allocated slots */
    uint32_t *req;       /* requested bytes per slot */
    uint64_t *ordinal;   /* alloc ordinal per slot */
} uvm_slab;

typedef struct uvm_arena {
    char *base;    /* 2 MiB aligned */
    void *raw;     /* what the driver returned */
    size_t raw_bytes;
    uint64_t npages;
    uint64_t used_pages;
    uvm_run **head; /* run starting at page i, or NULL */
    uvm_run **tail; /* run ending at page i, or NULL */
    uint64_t *discarded; /* bit i: page i was discarded and not populated since */
} uvm_arena;

typedef struct uvm_bins {
    uint64_t bitmap[UVM_NBINS / 64];
    uvm_run *bin[UVM_NBINS];
} uvm_bins;

typedef struct uvm_stream_slot {
    void *handle; /* a key only: the stream may be destroyed since (pool_streams.c) */
    int device;
    bool used;
    uvm_bins *bins;               /* free runs owned by this stream */
    uvm_slab *partial[UVM_NCLASSES]; /* slabs with free slots */
    uint64_t free_pages;          /* pages in this slot's bins */
    uint64_t live;                /* live blocks allocated on this slot's stream */
} uvm_stream_slot;

typedef struct uvm_pool_stats {
    uint64_t allocated_bytes, allocated_blocks, peak_allocated_bytes;
    uint64_t reserved_bytes, peak_reserved_bytes, arenas;
    uint64_t in_use_bytes; /* bytes of pages held by blocks and slabs */
    uint64_t n_malloc, n_free, n_oom, n_zero_size;
    uint64_t err_unknown, err_double_free, err_size, err_driver;
    uint64_t cross_stream_frees, reclaims, arenas_released, bytes_released;
    uint64_t last_oom_size;
    uint64_t slabs;
} uvm_pool_stats;

typedef struct uvm_pool {
    const uvm_prim *prim;
    uvm_arena **arenas; /* sorted by base */
    size_t n_arenas, cap_arenas;
    uvm_arena *last_arena;
    uvm_stream_slot streams[UVM_MAX_STREAMS]; /* slot 0: untagged */
    int last_slot;
    uint64_t arena_bytes; /* default reservation size */
    uint64_t limit_bytes; /* cap on reserved bytes */
    uint64_t next_ordinal;
    /* for a small block freed on another stream than its slab's (the free waits for that
     * stream), one per device, made on first use: an event may only be recorded on a
     * stream of its own context.  Reclaim waits for the device instead (pool_streams.c) */
    void *sync_event[UVM_MAX_DEVICES];
    uvm_pool_stats st;
    uvm_run *run_free_list; /* recycled run descriptors */
} uvm_pool;

typedef struct uvm_block {
    void *addr;
    uint64_t req, ordinal;
    int stream, device;
    uint64_t capacity; /* bytes actually reserved for it */
} uvm_block;

UVM_HIDDEN int uvm_pool_init(uvm_pool *p, const uvm_prim *prim);
UVM_HIDDEN void uvm_pool_fini(uvm_pool *p);
/* On UVM_OK fills *b (addr, ordinal, stream slot). */
UVM_HIDDEN int uvm_pool_malloc(uvm_pool *p, size_t size, int device, void *stream, uvm_block *b);
/* On UVM_OK fills *b with the freed block; on UVM_ESIZE b->req is the allocated size. */
UVM_HIDDEN int uvm_pool_free(uvm_pool *p, void *ptr, size_t size, int device, void *stream,
                             int own_stream, uvm_block *b);
/* The live block starting at ptr (UVM_EUNKNOWN / UVM_EDOUBLEFREE otherwise). */
UVM_HIDDEN int uvm_pool_lookup(uvm_pool *p, void *ptr, uvm_block *b);
/* UVM_OK when [ptr, ptr+bytes) lies inside one reservation (arena) of the pool, else
 * UVM_EUNKNOWN (and the thread's last error says why). */
UVM_HIDDEN int uvm_pool_check_range(uvm_pool *p, const void *ptr, uint64_t bytes);
/* The live block whose memory holds ptr (ptr may point inside it): UVM_OK and *b, else
 * UVM_EUNKNOWN (not our memory) or UVM_EDOUBLEFREE (our memory, no live block there). */
UVM_HIDDEN int uvm_pool_owner(uvm_pool *p, const void *ptr, uvm_block *b);
UVM_HIDDEN uint64_t uvm_pool_release_cached(uvm_pool *p);
UVM_HIDDEN void *uvm_pool_stream_handle(uvm_pool *p, int slot);
UVM_HIDDEN int uvm_size_class(uint64_t size);      /* -1 if > UVM_SMALL_MAX */
/* true when the pool keeps every promise of its structure (pool_check.c); else
 * false with the first broken one written to why.  O(runs + bins + slabs), O(pages) when
 * full: for tests and debug builds, never the hot path. */
UVM_HIDDEN bool uvm_pool_is_valid(const uvm_pool *p, bool full, char *why,
                                  size_t why_len);
#ifdef UVM_SCHED_DEBUG
/* debug builds (-DUVM_SCHED_DEBUG, the native tests): the pool is checked after every
 * state change; a broken invariant is logged and counted here */
UVM_HIDDEN extern uint64_t uvm_pool_broken;
UVM_HIDDEN void uvm_pool_debug_check(const uvm_pool *p, const char *after);
#define UVM_POOL_DEBUG_CHECK(p, after) uvm_pool_debug_check(p, after)
#else
#define UVM_POOL_DEBUG_CHECK(p, after) ((void)0)
#endif
UVM_HIDDEN uint64_t uvm_class_size(int cls);

/* ---- executor ---------------------------------------------------------------------------- */
typedef struct uvm_exec_stats {
    uint64_t armed, arms, actions_issued, actions_skipped, actions_failed,
        actions_unsupported, divergences, iterations, bytes_h2d, bytes_d2h, bytes_discarded,
        bytes_advised, resyncs, insertions, insertions_planned, insertion_mismatches;
} uvm_exec_stats;

typedef struct uvm_exec {
    bool armed;
    bool waiting; /* armed, waiting for the next marker to start an iteration */
    int sync, device;
    uvm_plan_row *rows; /* sorted by tick */
    uint64_t *row_idx;  /* index of each sorted row in the table given to arm */
    size_t n_rows;
    uint64_t *row_start; /* rows with tick k are rows[row_start[k] .. row_start[k+1]) */
    uint64_t *alloc_sizes;
    size_t n_allocs;
    uint64_t period;
    uint64_t ev_in_iter, allocs_in_iter, first_ordinal;
    bool diverged;
    /* UVM_SYNC_PERIOD_RESYNC (exec.c: "Re-finding the start"): seeking = diverged, waiting
     * for the live bytes of the iteration's start (start_level, from the last boundary
     * reached clean: level_known) or of the point where events were inserted (resume_level,
     * when may_resume: at event resume_ev, allocation resume_allocs of the iteration) */
    bool seeking, level_known, may_resume, resumed;
    uint64_t start_level, resume_level, resume_ev, resume_allocs;
    uint64_t iteration;
    uint64_t *iter_addr; /* address of allocation j of this iteration */
    uint64_t *iter_ord;  /* its global alloc ordinal (to tell a live block from a reuse) */
    /* the table of an inserted stretch (exec.c: "Planned insertions"), swapped with the
     * iteration's while it runs (in_ins): ins_period its events (0: none), ins_at the
     * iteration's event where it is inserted */
    uvm_plan_row *ins_rows;
    uint64_t *ins_row_idx, *ins_row_start, *ins_alloc_sizes, *ins_addr, *ins_ord;
    size_t ins_n_rows, ins_n_allocs;
    uint64_t ins_period, ins_at;
    bool in_ins;
    void *h2d, *d2h, *ev; /* side streams and the event ordering them after compute */
    void *aux, *ev_aux;   /* discards: a stream of their own, and the event compute waits on */
    void *ev_copies;      /* recorded on h2d and d2h before a discard: aux waits for them */
    const uvm_prim *prim;
    uvm_exec_stats st;
} uvm_exec;

/* ---- direct calls (uvm_sched_prefetch/advise/discard/synchronize/release_cached) ---- */
typedef struct uvm_direct_stats {
    uint64_t prefetches, advises, discards, syncs, releases, failed, unsupported, bytes_h2d,
        bytes_d2h, bytes_discarded, bytes_advised;
} uvm_direct_stats;

/* ---- global state ---------------------------------------------------------------------- */
typedef struct uvm_state {
    pthread_mutex_t lock; /* guards pool, exec, ring production, tick */
    bool ready;
    const uvm_prim *prim;
    char backend_reason[320];
    uvm_pool pool;
    uvm_ring ring;
    uvm_exec exec;
    uvm_direct_stats direct;
    bool tracing;
    uint64_t tick;  /* allocator events served */
    uint64_t marks;
} uvm_state;

UVM_HIDDEN extern uvm_state uvm_g;

/* api.c: with uvm_g.lock held, start the library if it is not started yet (the backend
 * the environment selects): UVM_OK or why not. */
UVM_HIDDEN int uvm_start_locked(void);
/* The first step of an entry point holding uvm_g.lock: start, or unlock and return why not. */
#define UVM_ENSURE_READY()                                                                     \
    do {                                                                                       \
        if (UVM_UNLIKELY(!uvm_g.ready)) {                                                      \
            int s_ = uvm_start_locked();                                                       \
            if (s_ != UVM_OK) {                                                                \
                pthread_mutex_unlock(&uvm_g.lock);                                             \
                return s_;                                                                     \
            }                                                                                  \
        }                                                                                      \
    } while (0)

UVM_HIDDEN void uvm_exec_init(uvm_exec *x, const uvm_prim *prim);
UVM_HIDDEN void uvm_exec_fini(uvm_exec *x);
/* called with the lock held after an allocator event has been served */
UVM_HIDDEN void uvm_exec_on_event(uvm_exec *x, int kind, const uvm_block *b, void *stream);
UVM_HIDDEN void uvm_exec_on_mark(uvm_exec *x);
/* called with the lock held; validates, copies and arms */
UVM_HIDDEN int uvm_exec_arm(uvm_exec *x, const uvm_plan_row *rows, size_t n_rows,
                            const uint64_t *alloc_sizes, size_t n_allocs, uint64_t period,
                            int sync, int device, int start_now);
/* the same, arming mid-iteration: phase allocator events of it have passed, addrs are
 * the addresses of its allocations so far (0 = freed) */
UVM_HIDDEN int uvm_exec_arm_at(uvm_exec *x, const uvm_plan_row *rows, size_t n_rows,
                               const uint64_t *alloc_sizes, size_t n_allocs, uint64_t period,
                               int sync, int device, int start_now, uint64_t phase,
                               const uint64_t *addrs, size_t n_addrs);
UVM_HIDDEN void uvm_exec_disarm(uvm_exec *x);
UVM_HIDDEN int uvm_exec_set_insertion(uvm_exec *x, const uvm_plan_row *rows, size_t n_rows,
                                      const uint64_t *alloc_sizes, size_t n_allocs,
                                      uint64_t events, uint64_t at);

/* probe.c: with the lock held, at a marker / after an allocator event served (before the
 * tick advances), and at reset */
UVM_HIDDEN void uvm_probe_on_mark(void);
UVM_HIDDEN void uvm_probe_on_event(void *stream, const uvm_block *alloc); /* alloc: NULL for a free */
UVM_HIDDEN void uvm_probe_reset(void);
/* api.c: a count from the environment (whole number or 0x hex, optional K/M/G/T unit);
 * dflt when unset, UVM_EINVAL (the variable and value in the last error) when unparsable */
UVM_HIDDEN int uvm_env_u64(const char *name, uint64_t dflt, uint64_t *out);
/* cupti.c: forget the samples and counters (uvm_sched_reset) */
UVM_HIDDEN void uvm_cupti_reset(void);

static inline void uvm_trace(int32_t kind, uint64_t addr, uint64_t size, uint64_t stream,
                             int32_t device, int64_t arg) {
    if (uvm_g.tracing)
        uvm_ring_push(&uvm_g.ring, uvm_g.tick, kind, addr, size, stream, device, arg);
}

#endif
