/* uvm_sched: a managed-memory (CUDA Unified Memory) pool allocator with an event ring
 * and a plan executor.  This is the one public header of the native core.
 *
 * Layers: prim_*.c (every driver call behind one table), pool*.c (caching
 * sub-allocator), ring.c (event ring), exec.c (plan executor), api.c and api_direct.c
 * (this ABI).  Every function returns a status code (UVM_OK or a negative
 * UVM_E*) or, for the PyTorch ABI, NULL; nothing here aborts or unwinds.
 */
#ifndef UVM_SCHED_H
#define UVM_SCHED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UVM_API __attribute__((visibility("default")))

/* Bumped whenever a struct below or a function signature changes; native.py refuses a
 * library whose uvm_sched_abi_version() differs from the one it was written for. */
#define UVM_SCHED_ABI_VERSION 5

/* status codes */
#define UVM_OK 0
#define UVM_EINVAL (-1)       /* bad argument (size overflow, unknown backend, bad plan) */
#define UVM_ENOMEM (-2)       /* cannot serve: limit reached or the driver is out of memory */
#define UVM_EDRIVER (-3)      /* a driver call failed (see uvm_sched_last_error) */
#define UVM_EUNSUPPORTED (-4) /* the driver lacks the entry point (e.g. discard) */
#define UVM_EUNKNOWN (-5)     /* pointer was never given out by this allocator */
#define UVM_EDOUBLEFREE (-6)  /* pointer is ours but not allocated (double free) */
#define UVM_ESIZE (-7)        /* free with a size other than the allocated one */
#define UVM_EBUSY (-8)        /* reset while blocks are still allocated */
#define UVM_ENOBACKEND (-9)   /* requested backend cannot be loaded */

/* Size argument of uvm_sched_free_status() meaning "do not check the size". */
#define UVM_SIZE_ANY ((size_t)-1)

/* Event kinds in the ring.  0, 1 and 3 are the trace model's ALLOC, FREE, MARK. */
enum uvm_event_kind {
    UVM_EV_ALLOC = 0,        /* addr, size (requested bytes), stream; arg = global alloc ordinal */
    UVM_EV_FREE = 1,         /* addr, size, stream; arg = the block's alloc ordinal */
    UVM_EV_MARK = 3,         /* iteration marker (uvm_sched_step); arg = marker count */
    UVM_EV_ITER = 4,         /* executor starts an iteration; arg = iteration number, addr =
                                the tick of its allocator event 0 (earlier than this record's
                                when armed at a phase; the next event's at a period's end) */
    UVM_EV_ARM = 5,          /* plan armed; size = rows, arg = period_events */
    UVM_EV_DISARM = 6,       /* plan disarmed; arg = iterations run */
    UVM_EV_ACTION = 16,      /* 16 + action code: an issued plan action; addr/size = range,
                                stream = stream it was queued on, arg = plan row */
    UVM_EV_ACTION_END = 31,
    UVM_EV_OOM = 32,         /* malloc failed; size = request, arg = status */
    UVM_EV_BAD_FREE = 33,    /* free of a pointer we never gave out; addr, size */
    UVM_EV_DOUBLE_FREE = 34, /* free of one of our pointers that is not allocated */
    UVM_EV_SIZE_MISMATCH = 35, /* free with a wrong size; size = given, arg = allocated */
    UVM_EV_DRIVER_ERROR = 36,  /* a driver call failed; arg = driver status */
    UVM_EV_DIVERGENCE = 37,  /* executor: allocation j of the iteration does not match the
                                plan; size = actual bytes, arg = j */
    UVM_EV_SKIPPED = 38,     /* executor: action's block not live; arg = plan row */
    UVM_EV_ACTION_FAILED = 39, /* executor: driver refused an action; arg = plan row */
    UVM_EV_UNSUPPORTED = 40, /* executor: driver lacks the call (discard); arg = plan row */
    UVM_EV_UNADVISE = 41,    /* direct call: advice unset; addr/size, arg = the advise action */
    UVM_EV_RELEASE = 42,     /* direct call: cached memory released; size = bytes */
    UVM_EV_SYNC = 43,        /* direct call: waited for stream */
    UVM_EV_PROBE = 44,       /* fault probe moved a range to the host; addr/size, stream,
                                arg = probe row (uvm_sched_probe_set) */
    UVM_EV_RESUME = 45       /* executor (sync=UVM_SYNC_PERIOD_RESYNC): the iteration goes on
                                after events inserted into it (they ran without actions);
                                size = the events inserted, arg = its event it resumes at */
};

/* Plan actions: the order is planner.ACTIONS (the ABI with the Python planner). */
enum uvm_action {
    UVM_ACT_PREFETCH_TO_DEVICE = 0,
    UVM_ACT_PREFETCH_TO_HOST = 1,
    UVM_ACT_ADVISE_PREFERRED_HOST = 2,
    UVM_ACT_ADVISE_ACCESSED_BY = 3,
    UVM_ACT_ADVISE_READ_MOSTLY = 4,
    UVM_ACT_DISCARD = 5,
    UVM_ACT_COUNT = 6
};

/* One ring record (56 bytes).  tick = ordinal of the allocator event (malloc or free,
 * from 0 at library start); events that are not allocator events carry the ordinal of
 * the allocator event they follow (MARK: of the next one).  t_ns = CLOCK_MONOTONIC ns. */
typedef struct uvm_event {
    uint64_t tick;
    uint64_t t_ns;
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    int64_t arg;
    int32_t kind;
    int32_t device;
} uvm_event;

/* One plan row for the executor (48 bytes). */
typedef struct uvm_plan_row {
    int64_t tick;       /* allocator-event ordinal within the iteration */
    int32_t action;     /* enum uvm_action */
    int32_t persistent; /* 0: block = alloc ordinal in the iteration; 1: addr is given */
    int64_t block;      /* non-persistent: alloc ordinal in the iteration; persistent: the
                           block's global alloc ordinal (uvm_sched_block_info), checked when
                           the action fires so a reused address is never mistaken for it */
    uint64_t offset;    /* byte offset into the block */
    uint64_t bytes;     /* bytes from offset; clamped to the block's size */
    uint64_t addr;      /* persistent rows: the block's start address (0 = unknown: skipped) */
} uvm_plan_row;

#define UVM_SYNC_MARKER 0 /* iterations start at uvm_sched_step() */
#define UVM_SYNC_PERIOD 1 /* iterations are every period_events allocator events */
/* as UVM_SYNC_PERIOD, but after a divergence the executor waits for the learned iteration's
 * start (the live bytes at its clean iteration boundaries, seen again) instead of counting
 * on from the shifted position (exec.c: "Re-finding the start") */
#define UVM_SYNC_PERIOD_RESYNC 2

/* ---- PyTorch CUDAPluggableAllocator ABI --------------------------------------------
 * torch calls exactly:  void* alloc(size_t size, int device, cudaStream_t stream)
 *                       void  free(void* ptr, size_t size, int device, cudaStream_t stream)
 * (the 4-argument free; nothing checks these signatures, keep them as they are).
 * malloc returns NULL when it cannot serve (stats and the ring say why); size 0 gives
 * NULL.  torch's CUDAPluggableAllocator::malloc does NOT check for NULL (a tensor at
 * address 0 would kill the context at its first kernel), so PyTorch is given
 * uvm_sched_torch_malloc from the C++ library _uvm_sched_torch (torch_shim.cpp), which
 * throws with the reason instead; see also torch_abi.c (record_stream, empty_cache, graph
 * capture).  free of NULL does nothing; a bad free is counted, logged and refused, the
 * pool is left untouched. */
UVM_API void *uvm_sched_malloc(size_t size, int device, void *stream);
UVM_API void uvm_sched_free(void *ptr, size_t size, int device, void *stream);
UVM_API int uvm_sched_abi_version(void);

/* ---- the rest of the API (used by uvm_sched.native through ctypes) ----------------- */
/* Select a backend ("auto", "cuda", "host"; NULL = $UVM_SCHED_BACKEND or auto).  Done
 * implicitly by the first call; explicit init after that returns UVM_EINVAL unless the
 * backend is the one already selected. */
UVM_API int uvm_sched_init(const char *backend);
/* Tear everything down (arenas, plan, ring contents, counters) and select a backend
 * again.  UVM_EBUSY if blocks are allocated and !force.  For tests. */
UVM_API int uvm_sched_reset(const char *backend, int force);
UVM_API const char *uvm_sched_backend_name(void);
/* Why the backend is what it is (e.g. why auto fell back to host). */
UVM_API const char *uvm_sched_backend_reason(void);
/* Thread-local text of the last error on this thread ("" if none). */
UVM_API const char *uvm_sched_last_error(void);
/* Where the errors logged from the PyTorch ABI go: stderr (on = 0, the default) or a
 * buffer of up to 4 KiB of '\n'-terminated lines (on = 1) that uvm_sched_take_log empties
 * (Python's logging).  Returns the previous setting. */
UVM_API int uvm_sched_log_capture(int on);
/* Move up to cap - 1 bytes of buffered log lines into buf (NUL-terminated); *dropped (if
 * not NULL) = lines lost to a full buffer since the last take.  Returns the bytes moved. */
UVM_API size_t uvm_sched_take_log(char *buf, size_t cap, uint64_t *dropped);

/* *out = the block (NULL for size 0); UVM_EINVAL when out is NULL. */
UVM_API int uvm_sched_malloc_status(size_t size, int device, void *stream, void **out);
/* stream: the stream the block was last used on; own_stream=1 ignores it and uses the
 * block's allocation stream, which must then still exist (not cuStreamDestroy'ed: the
 * armed executor orders its actions after it).  size UVM_SIZE_ANY skips the size check. */
UVM_API int uvm_sched_free_status(void *ptr, size_t size, int device, void *stream,
                                  int own_stream);
/* Size (requested bytes), alloc ordinal and stream of the live block starting at ptr
 * (UVM_EINVAL when an out-pointer is NULL). */
UVM_API int uvm_sched_block_info(void *ptr, uint64_t *size, uint64_t *ordinal,
                                 uint64_t *stream);
/* ordinals[i] = the alloc ordinal of the live block starting at ptrs[i], UINT64_MAX where
 * none starts there, for n pointers under one hold of the pool's lock (an armed plan's
 * identity check of thousands of persistent blocks, one call). UVM_EINVAL when n > 0 and
 * an array is NULL. */
UVM_API int uvm_sched_block_ordinals(const uint64_t *ptrs, size_t n, uint64_t *ordinals);
UVM_API int uvm_sched_step(void);
/* Return cached memory of empty arenas to the driver; returns bytes released (>= 0), or
 * UVM_EDRIVER when the driver failed to free an arena (that arena stays reserved and
 * usable; last_error says how many bytes did go back). */
UVM_API int64_t uvm_sched_release_cached(void);
/* Check every invariant of the pool from scratch (O(runs + bins + slabs); full != 0: also
 * O(pages)): UVM_OK, or UVM_EINVAL with the first broken one in uvm_sched_last_error().
 * For tests and debugging, never the hot path (debug builds also check after every
 * change). */
UVM_API int uvm_sched_check_pool(int full);

/* Stats: a comma-separated list of names, and the values (uint64) in that order; returns
 * how many values there are (out NULL: only that count). */
UVM_API const char *uvm_sched_stats_names(void);
UVM_API size_t uvm_sched_stats(uint64_t *out, size_t n);

/* Ring: events not yet drained, and copy up to max of them into out (oldest first; out
 * NULL: none taken, returns 0). */
UVM_API int uvm_sched_set_tracing(int on); /* returns the previous setting */
UVM_API size_t uvm_sched_ring_pending(void);
UVM_API size_t uvm_sched_drain(uvm_event *out, size_t max);

/* ---- direct calls: the executor's driver table, called now on the caller's stream ------
 * For calibration and tools.  [ptr, ptr+bytes) must lie inside memory this allocator has
 * reserved (else UVM_EUNKNOWN and the driver is not called); device = the CUDA device
 * ordinal (where a prefetch to the device goes, whom advice is about).  Every call is
 * counted in stats (direct_*) and recorded in the ring: a prefetch, advice or discard as
 * the plan action it equals (kind UVM_EV_ACTION + action) with arg = -1 (no plan row),
 * unset advice as UVM_EV_UNADVISE, a refusal as UVM_EV_ACTION_FAILED / UVM_EV_UNSUPPORTED
 * with arg = -1 - action.  The host backend records and counts them and does nothing. */
UVM_API int uvm_sched_prefetch(void *ptr, size_t bytes, int to_host, int device, void *stream);
/* action: UVM_ACT_ADVISE_PREFERRED_HOST, _ACCESSED_BY or _READ_MOSTLY; unset != 0 removes
 * that advice (CU_MEM_ADVISE_UNSET_*) instead of setting it. */
UVM_API int uvm_sched_advise(void *ptr, size_t bytes, int action, int unset, int device);
/* The range must lie inside one live block that owns whole 2 MiB pages (a block > 1 MiB):
 * the pages of a small block are shared with other blocks. UVM_EUNSUPPORTED when the
 * driver has no discard (before CUDA 13). */
UVM_API int uvm_sched_discard(void *ptr, size_t bytes, int device, void *stream);
/* Wait until the work queued on stream so far is done (an event recorded on it; the
 * allocator lock is not held while waiting).  stream NULL = the legacy default stream. */
UVM_API int uvm_sched_synchronize(void *stream, int device);

/* Executor.  rows sorted or not (the executor sorts a copy by tick); alloc_sizes[j] = bytes
 * of allocation j of the iteration (0: any size); period_events = allocator events per iteration.
 * start_now: the iteration starts with the next allocator event (else at the next
 * marker, sync=marker only).  Replaces any armed plan.  UVM_EINVAL (nothing replaced)
 * when rows or alloc_sizes is NULL with a count above 0, or period_events is not in
 * 1..2^24. */
UVM_API int uvm_sched_exec_arm(const uvm_plan_row *rows, size_t n_rows,
                               const uint64_t *alloc_sizes, size_t n_allocs,
                               uint64_t period_events, int sync, int device, int start_now);
/* The same, armed mid-iteration: phase = allocator events of the current iteration already
 * past (0 <= phase < period_events; phase > 0 starts now, so with sync=marker it needs
 * start_now); phase_addrs[j] (n_phase_addrs <= phase, <= n_allocs) = the address of the
 * iteration's allocation j made before arming, 0 when it is freed already (rows naming it
 * are skipped).  A live one whose size is not alloc_sizes[j] is a divergence.  phase 0
 * with no addresses is uvm_sched_exec_arm.  UVM_EINVAL (nothing replaced) otherwise. */
UVM_API int uvm_sched_exec_arm_at(const uvm_plan_row *rows, size_t n_rows,
                                  const uint64_t *alloc_sizes, size_t n_allocs,
                                  uint64_t period_events, int sync, int device, int start_now,
                                  uint64_t phase, const uint64_t *phase_addrs,
                                  size_t n_phase_addrs);
/* The table of a stretch of `events` allocator events inserted at event `at` of the armed
 * sync=period_resync iteration (an eval batch), run when such a stretch starts with an
 * allocation of alloc_sizes[0] bytes there; events 0 clears it.  Its rows' ticks and
 * blocks count from the stretch's first allocation; persistent rows carry addresses.  It
 * outlives re-arming.  UVM_EINVAL (nothing replaced) otherwise. */
UVM_API int uvm_sched_exec_set_insertion(const uvm_plan_row *rows, size_t n_rows,
                                         const uint64_t *alloc_sizes, size_t n_allocs,
                                         uint64_t events, uint64_t at);
UVM_API int uvm_sched_exec_disarm(void);

/* ---- calibration probe (calib.c) ------------------------------------------------------
 * Measures the link and the driver's fault path on `device` within budget_s seconds of
 * device time (0.02..10), through the driver table (no kernel of ours): bytes per second,
 * seconds.  A figure that could not be measured is 0 (fault_batch_s when device writes to
 * host-resident pages took no longer than to resident ones).  Managed memory of its own
 * (never more than half the device's free memory), freed before it returns; the allocator
 * lock is held throughout.  UVM_EUNSUPPORTED on the host backend (no device) or a driver
 * that lacks a call the probe needs; UVM_ENOMEM when the device has too little free. */
typedef struct uvm_calibration {
    double h2d_Bps, d2h_Bps;         /* cuMemPrefetchAsync each way, alone */
    double duplex_Bps;               /* both ways at once (two streams): bytes / elapsed */
    double duplex_h2d_Bps, duplex_d2h_Bps; /* each way's own rate while both run */
    double fault_batch_s;            /* one fault batch (a write to a host-resident page) */
    double remote_Bps;               /* the device reading host-resident data in place */
    double device_s, wall_s;         /* the probe's device time (events), host time */
    uint64_t region_bytes;           /* N: h2d alone moved N bytes, d2h alone 2N */
    uint64_t duplex_h2d_bytes, duplex_d2h_bytes, fault_batches, remote_bytes;
    uint64_t free_bytes, total_bytes; /* device memory when the probe started */
    char device_name[256];
} uvm_calibration;
UVM_API int uvm_sched_calibrate(int device, double budget_s, uvm_calibration *out);

/* ---- fault sampling: CUPTI unified-memory GPU page-fault records (cupti.c) --------------
 * start: dlopen CUPTI ($UVM_SCHED_LIBCUPTI, else path, else libcupti.so[.13|.12]), register
 * the buffer callbacks, configure the GPU page-fault counter for device, enable
 * CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER.  UVM_ENOBACKEND: no CUPTI (last error says
 * why); UVM_EUNSUPPORTED: CUPTI says the platform or device has no UM counters;
 * UVM_EDRIVER: CUPTI refused (the call and CUPTI's result string).  Already started: OK.
 * flush: deliver the buffered records (forced flush); stop: flush, then disable.
 * take: move up to max samples collected so far into out (oldest first), returns how many.
 * clock: a CUPTI timestamp and the CLOCK_MONOTONIC ns (the ring's clock) at the same
 * moment (the midpoint of two readings around CUPTI's). */
typedef struct uvm_fault_sample {
    uint64_t address; /* the faulting page's virtual address */
    uint64_t t_cupti; /* ns on CUPTI's clock: when the driver started processing the fault */
    uint64_t value;   /* page fault groups for the page */
    uint32_t flags;   /* CUpti_ActivityUnifiedMemoryAccessType */
    uint32_t device;  /* srcId: the faulting device */
} uvm_fault_sample;   /* 32 bytes */
UVM_API int uvm_sched_cupti_start(const char *path, int device);
UVM_API int uvm_sched_cupti_flush(void);
UVM_API int uvm_sched_cupti_stop(void);
UVM_API size_t uvm_sched_cupti_take(uvm_fault_sample *out, size_t max);
UVM_API int uvm_sched_cupti_clock(uint64_t *cupti_ns, uint64_t *mono_ns);
/* names (comma-separated) and values, as uvm_sched_stats */
UVM_API const char *uvm_sched_cupti_stats_names(void);
UVM_API size_t uvm_sched_cupti_stats(uint64_t *out, size_t n);

/* Fault probes (probe.c): ranges moved to the host (a prefetch) at a tick of every
 * iteration so that their next GPU use faults.  tick: issued right after allocator event
 * `tick` of the iteration (from 0 at the latest marker) on its stream; -1: at the marker,
 * on the legacy NULL stream.  Replaces the table (n = 0 clears it): its tick -1 rows fire
 * at once, its rows still ahead in the current iteration when they come, and all of them
 * in every iteration after.  UVM_EINVAL: tick < -1, bytes 0, device < 0, more than 2^24 rows,
 * an addr-0 row whose alloc_event is < 0 or after its tick.
 * stats: rows, issued, skipped (range no longer reserved; addr-0 rows: no block of that
 * allocation alive at that size), failed, bytes issued. */
typedef struct uvm_probe_row {
    int64_t tick;
    uint64_t addr;
    uint64_t bytes;
    int32_t device;
    int32_t alloc_event; /* addr 0: the block allocated by allocator event alloc_event of the
                          * iteration (>= 0, <= tick); bytes its size; otherwise ignored */
} uvm_probe_row; /* 32 bytes */
UVM_API int uvm_sched_probe_set(const uvm_probe_row *rows, size_t n);
UVM_API size_t uvm_sched_probe_stats(uint64_t *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
