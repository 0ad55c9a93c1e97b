/* prim "cuda": the CUDA driver, loaded at run time with dlopen, so installing needs no
 * CUDA toolkit.  Entry points come from cuGetProcAddress at the ABI version this file was
 * written for (not "the newest"): cuMemPrefetchAsync and cuMemAdvise changed signature in
 * CUDA 12.2 (they take a CUmemLocation), so a 12.2+ driver is asked for the 12020 forms
 * and an older one for the 8000 forms with a device ordinal (CU_DEVICE_CPU = -1 = host).
 * cuMemDiscardBatchAsync is asked for when present (CUDA 13.0 drivers); without it a
 * discard returns UVM_EUNSUPPORTED, which the executor counts.
 *
 * Contexts: every call that needs one runs with the primary context of its device
 * current (what the CUDA runtime, and so PyTorch, CuPy and Numba, use), and puts back the
 * caller's context when it had to change it: a thread whose current context belongs to
 * another device (one process driving two GPUs) keeps it.  Events are ours, so each
 * carries its device; a record or wait runs in that device's context, as "hEvent and
 * hStream must be from the same context" (cuda.h, cuEventRecord) requires.
 *
 * Discards: cuda.h says of cuMemDiscardBatchAsync's hStream "Must not be legacy NULL
 * stream"; a discard asked for on the NULL stream goes on a stream of ours, after the
 * work queued on the NULL stream so far, and the NULL stream waits for it.
 *
 * $UVM_SCHED_LIBCUDA names another library to load instead of libcuda.so.1 (the tests
 * point it at a fake driver that records every call and refuses what the real one
 * documents as invalid: tests/native/PRECONDITIONS.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glibc_compat.h"
#include "internal.h"

/* The few driver types we need, with the layout of cuda.h. */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1, _HOST = 2 */
    int id;
} CUmemLocation;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CU_MEM_ATTACH_GLOBAL 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_LOCATION_TYPE_HOST 2
#define CU_MEM_ADVISE_SET_READ_MOSTLY 1
#define CU_MEM_ADVISE_UNSET_READ_MOSTLY 2
#define CU_MEM_ADVISE_SET_PREFERRED_LOCATION 3
#define CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION 4
#define CU_MEM_ADVISE_SET_ACCESSED_BY 5
#define CU_MEM_ADVISE_UNSET_ACCESSED_BY 6
#define CU_DEVICE_CPU (-1)
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DISABLE_TIMING 2

typedef CUresult (*pfn_getproc_v2)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*pfn_getproc_v1)(const char *, void **, int, unsigned long long);

static struct {
    void *lib;
    int version;
    pfn_getproc_v2 getproc2;
    pfn_getproc_v1 getproc1;
    CUresult (*init)(unsigned);
    CUresult (*driver_version)(int *);
    CUresult (*device_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*ctx_get)(CUcontext *);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*prefetch_v2)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream);
    CUresult (*prefetch_v1)(CUdeviceptr, size_t, CUdevice, CUstream);
    CUresult (*advise_v2)(CUdeviceptr, size_t, int, CUmemLocation);
    CUresult (*advise_v1)(CUdeviceptr, size_t, int, CUdevice);
    CUresult (*discard_batch)(CUdeviceptr *, size_t *, size_t, unsigned long long, CUstream);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
    CUresult (*event_query)(CUevent);
    CUresult (*event_sync)(CUevent);
    CUresult (*ctx_sync)(void);
    CUresult (*stream_is_capturing)(CUstream, int *);
    CUresult (*error_name)(CUresult, const char **);
    /* the calibration probe's (calib.c): optional, the probe says which is missing */
    CUresult (*event_elapsed)(float *, CUevent, CUevent);
    CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*copy_dtod)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*mem_get_info)(size_t *, size_t *);
    CUresult (*device_name)(char *, int, CUdevice);
    int n_devices;
    int last_device; /* the device of the latest call, for calls that name none */
    CUcontext primary[UVM_MAX_DEVICES];
    /* per device, made on the first discard asked for on the legacy NULL stream: a stream
     * of ours and the two events that order it after and before the NULL stream */
    CUstream discard_stream[UVM_MAX_DEVICES];
    CUevent discard_before[UVM_MAX_DEVICES], discard_after[UVM_MAX_DEVICES];
} D;

/* Our events: the driver's handle and the device whose context made it. */
typedef struct cu_event {
    CUevent ev;
    int device;
} cu_event;

static const char *err_name(CUresult r) {
    const char *s = NULL;
    if (D.error_name && D.error_name(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA_ERROR_?";
}

static int drv_fail(const char *call, CUresult r) {
    uvm_set_error("%s failed: %s (%d)", call, err_name(r), r);
    return r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? UVM_ENOMEM : UVM_EDRIVER;
}

#define CHECK(call, expr)                                                                      \
    do {                                                                                       \
        CUresult r_ = (expr);                                                                  \
        if (r_ != CUDA_SUCCESS) return drv_fail(call, r_);                                     \
    } while (0)

/* The context a call ran in: what to put back when it is done (see the header). */
typedef struct ctx_guard {
    CUcontext prev;
    int changed;
} ctx_guard;

/* Make a context of `device` current (device -1: any current context, else the primary
 * of the last device used); *g says what ctx_leave puts back. */
static int ctx_enter(int device, ctx_guard *g) {
    CUcontext cur = NULL;
    g->prev = NULL;
    g->changed = 0;
    if (D.ctx_get(&cur) != CUDA_SUCCESS) cur = NULL;
    if (cur && device < 0) return UVM_OK;
    if (device < 0) device = D.last_device;
    if (device >= D.n_devices || device >= UVM_MAX_DEVICES) {
        uvm_set_error("device %d does not exist (%d devices)", device, D.n_devices);
        return UVM_EINVAL;
    }
    D.last_device = device;
    CUdevice have;
    if (cur && D.ctx_get_device(&have) == CUDA_SUCCESS && have == device) return UVM_OK;
    if (!D.primary[device]) {
        CUdevice dev;
        CHECK("cuDeviceGet", D.device_get(&dev, device));
        CHECK("cuDevicePrimaryCtxRetain", D.primary_retain(&D.primary[device], dev));
    }
    CHECK("cuCtxSetCurrent", D.ctx_set(D.primary[device]));
    g->prev = cur;
    g->changed = 1;
    return UVM_OK;
}

/* Put back the caller's context.  A thread that had none keeps the primary, as the CUDA
 * runtime leaves it. */
static void ctx_leave(const ctx_guard *g) {
    if (g->changed && g->prev) D.ctx_set(g->prev);
}

/* `expr` (a uvm status) with `device`'s context current */
#define IN_CTX(device, expr)                                                                   \
    do {                                                                                       \
        ctx_guard g_;                                                                          \
        int s_ = ctx_enter((device), &g_);                                                     \
        if (s_ == UVM_OK) s_ = (expr);                                                         \
        ctx_leave(&g_);                                                                        \
        return s_;                                                                             \
    } while (0)

static int st(const char *call, CUresult r) { return r == CUDA_SUCCESS ? UVM_OK : drv_fail(call, r); }

static int alloc_in_ctx(size_t bytes, void **out) {
    CUdeviceptr p = 0;
    CHECK("cuMemAllocManaged", D.alloc_managed(&p, bytes, CU_MEM_ATTACH_GLOBAL));
    *out = (void *)(uintptr_t)p;
    return UVM_OK;
}

static int cu_alloc(int device, size_t bytes, void **out) {
    IN_CTX(device, alloc_in_ctx(bytes, out));
}

/* cuMemFree needs a current context (CUDA_ERROR_INVALID_CONTEXT without one); managed
 * memory is one address space, so any device's will do. */
static int cu_free(void *p, size_t bytes) {
    (void)bytes;
    IN_CTX(-1, st("cuMemFree", D.mem_free((CUdeviceptr)(uintptr_t)p)));
}

static int prefetch_in_ctx(int device, void *p, size_t bytes, int to_host, void *stream) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    if (D.prefetch_v2) {
        CUmemLocation loc = {to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                             to_host ? 0 : device};
        CHECK("cuMemPrefetchAsync", D.prefetch_v2(d, bytes, loc, 0, (CUstream)stream));
    } else {
        CHECK("cuMemPrefetchAsync",
              D.prefetch_v1(d, bytes, to_host ? CU_DEVICE_CPU : device, (CUstream)stream));
    }
    return UVM_OK;
}

static int cu_prefetch(int device, void *p, size_t bytes, int to_host, void *stream) {
    IN_CTX(device, prefetch_in_ctx(device, p, bytes, to_host, stream));
}

static int advise_in_ctx(int device, void *p, size_t bytes, int advice) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    int code;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    int dev = device;
    switch (advice) {
    case UVM_ADV_PREFERRED_HOST:
        code = CU_MEM_ADVISE_SET_PREFERRED_LOCATION;
        loc.type = CU_MEM_LOCATION_TYPE_HOST;
        loc.id = 0;
        dev = CU_DEVICE_CPU;
        break;
    case UVM_ADV_ACCESSED_BY:
        code = CU_MEM_ADVISE_SET_ACCESSED_BY;
        break;
    case UVM_ADV_READ_MOSTLY:
        code = CU_MEM_ADVISE_SET_READ_MOSTLY; /* the location is ignored by the driver */
        break;
    case UVM_ADV_UNSET_PREFERRED: /* the location is ignored: whatever was preferred */
        code = CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
        break;
    case UVM_ADV_UNSET_ACCESSED_BY: /* removes this device from the accessed-by set */
        code = CU_MEM_ADVISE_UNSET_ACCESSED_BY;
        break;
    case UVM_ADV_UNSET_READ_MOSTLY:
        code = CU_MEM_ADVISE_UNSET_READ_MOSTLY;
        break;
    default:
        uvm_set_error("unknown advice %d", advice);
        return UVM_EINVAL;
    }
    if (D.advise_v2)
        CHECK("cuMemAdvise", D.advise_v2(d, bytes, code, loc));
    else
        CHECK("cuMemAdvise", D.advise_v1(d, bytes, code, dev));
    return UVM_OK;
}

static int cu_advise(int device, void *p, size_t bytes, int advice) {
    IN_CTX(device, advise_in_ctx(device, p, bytes, advice));
}

/* the context of `device` is current */
static int discard_in_ctx(int device, void *p, size_t bytes, void *stream) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    size_t n = bytes;
    if (stream) return st("cuMemDiscardBatchAsync", D.discard_batch(&d, &n, 1, 0, stream));
    if (!D.discard_stream[device]) {
        CUstream q = NULL;
        CUevent a = NULL, b = NULL;
        CUresult r = D.stream_create(&q, CU_STREAM_NON_BLOCKING);
        if (r == CUDA_SUCCESS) r = D.event_create(&a, CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS) r = D.event_create(&b, CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
            if (b) D.event_destroy(b);
            if (a) D.event_destroy(a);
            if (q) D.stream_destroy(q);
            return drv_fail("cuStreamCreate/cuEventCreate (discard stream)", r);
        }
        D.discard_stream[device] = q;
        D.discard_before[device] = a;
        D.discard_after[device] = b;
    }
    CUstream q = D.discard_stream[device];
    /* after the NULL stream's queued work, and before its next */
    CHECK("cuEventRecord", D.event_record(D.discard_before[device], NULL));
    CHECK("cuStreamWaitEvent", D.stream_wait_event(q, D.discard_before[device], 0));
    CHECK("cuMemDiscardBatchAsync", D.discard_batch(&d, &n, 1, 0, q));
    CHECK("cuEventRecord", D.event_record(D.discard_after[device], q));
    CHECK("cuStreamWaitEvent", D.stream_wait_event(NULL, D.discard_after[device], 0));
    return UVM_OK;
}

static int cu_discard(int device, void *p, size_t bytes, void *stream) {
    if (!D.discard_batch) {
        uvm_set_error("this driver (version %d) has no cuMemDiscardBatchAsync", D.version);
        return UVM_EUNSUPPORTED;
    }
    IN_CTX(device, discard_in_ctx(device, p, bytes, stream));
}

static int cu_stream_create(int device, void **out) {
    /* non-blocking: the side streams must not serialise with the legacy default stream,
     * which is where a program that never made a stream runs its kernels. */
    IN_CTX(device, st("cuStreamCreate", D.stream_create((CUstream *)out, CU_STREAM_NON_BLOCKING)));
}

static int cu_stream_destroy(void *stream) {
    CHECK("cuStreamDestroy", D.stream_destroy((CUstream)stream));
    return UVM_OK;
}

static int event_create_in_ctx(int device, void **out, unsigned flags) {
    cu_event *e = calloc(1, sizeof *e);
    if (!e) {
        uvm_set_error("out of host memory for an event");
        return UVM_ENOMEM;
    }
    CUresult r = D.event_create(&e->ev, flags);
    if (r != CUDA_SUCCESS) {
        free(e);
        return drv_fail("cuEventCreate", r);
    }
    e->device = device;
    *out = e;
    return UVM_OK;
}

static int cu_event_create(int device, void **out) {
    IN_CTX(device, event_create_in_ctx(device, out, CU_EVENT_DISABLE_TIMING));
}

/* ---- the calibration probe's calls (calib.c) ---- */
static int cu_timer_create(int device, void **out) {
    IN_CTX(device, event_create_in_ctx(device, out, 0 /* CU_EVENT_DEFAULT: timed */));
}

static int elapsed_in_ctx(void *a, void *b, double *out) {
    float ms = 0;
    CHECK("cuEventElapsedTime", D.event_elapsed(&ms, ((cu_event *)a)->ev, ((cu_event *)b)->ev));
    *out = (double)ms / 1e3;
    return UVM_OK;
}

static int cu_elapsed_s(void *a, void *b, double *out) {
    IN_CTX(((cu_event *)a)->device, elapsed_in_ctx(a, b, out));
}

static int cu_memset_async(int device, void *p, size_t bytes, void *stream) {
    IN_CTX(device, st("cuMemsetD8Async", D.memset_d8((CUdeviceptr)(uintptr_t)p, 0x5a, bytes,
                                                     (CUstream)stream)));
}

static int cu_copy_async(int device, void *dst, const void *src, size_t bytes, void *stream) {
    IN_CTX(device, st("cuMemcpyDtoDAsync", D.copy_dtod((CUdeviceptr)(uintptr_t)dst,
                                                       (CUdeviceptr)(uintptr_t)src, bytes,
                                                       (CUstream)stream)));
}

static int mem_info_in_ctx(uint64_t *free_bytes, uint64_t *total_bytes) {
    size_t f = 0, t = 0;
    CHECK("cuMemGetInfo", D.mem_get_info(&f, &t));
    *free_bytes = f;
    *total_bytes = t;
    return UVM_OK;
}

static int cu_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes) {
    IN_CTX(device, mem_info_in_ctx(free_bytes, total_bytes));
}

static int cu_device_name(int device, char *buf, size_t len) {
    if (device < 0 || device >= D.n_devices) {
        uvm_set_error("device %d does not exist (%d devices)", device, D.n_devices);
        return UVM_EINVAL;
    }
    CUdevice dev;
    CHECK("cuDeviceGet", D.device_get(&dev, device));
    CHECK("cuDeviceGetName", D.device_name(buf, (int)(len > 1024 ? 1024 : len), dev));
    return UVM_OK;
}

static int cu_event_destroy(void *ev) {
    cu_event *e = ev;
    CUresult r = D.event_destroy(e->ev);
    free(e);
    return st("cuEventDestroy", r);
}

/* A record on the NULL stream means the current context's: the event's. */
static int cu_event_record(void *ev, void *stream) {
    cu_event *e = ev;
    IN_CTX(e->device, st("cuEventRecord", D.event_record(e->ev, (CUstream)stream)));
}

static int cu_stream_wait(void *stream, void *ev) {
    cu_event *e = ev;
    IN_CTX(e->device,
           st("cuStreamWaitEvent", D.stream_wait_event((CUstream)stream, e->ev, 0)));
}

static int cu_event_query(void *ev) {
    CUresult r = D.event_query(((cu_event *)ev)->ev);
    if (r == CUDA_SUCCESS) return UVM_OK;
    if (r == CUDA_ERROR_NOT_READY) return 1;
    return drv_fail("cuEventQuery", r);
}

static int cu_event_sync(void *ev) {
    CHECK("cuEventSynchronize", D.event_sync(((cu_event *)ev)->ev));
    return UVM_OK;
}

/* cuda.h, cuCtxSynchronize: "Blocks until the device has completed all preceding
 * requested tasks": also the work of a stream destroyed since, which cuStreamDestroy
 * lets finish ("the resources associated with hStream will be released automatically
 * once the device has completed all work in hStream"). */
static int cu_device_sync(int device) {
    IN_CTX(device, st("cuCtxSynchronize", D.ctx_sync()));
}

static int capturing_in_ctx(void *stream) {
    int status = 0; /* CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE = 1, _INVALIDATED = 2 */
    CHECK("cuStreamIsCapturing", D.stream_is_capturing((CUstream)stream, &status));
    return status != 0;
}

static int cu_stream_capturing(int device, void *stream) {
    if (!D.stream_is_capturing) return 0; /* a driver before graphs: nothing captures */
    IN_CTX(device, capturing_in_ctx(stream));
}

static void cu_shutdown(void) {
    /* The driver stays loaded: PyTorch or another user may hold the same library, and
     * unloading libcuda in a live process is never safe.  Our discard streams go. */
    for (int d = 0; d < UVM_MAX_DEVICES; d++) {
        if (D.discard_stream[d]) D.stream_destroy(D.discard_stream[d]);
        if (D.discard_before[d]) D.event_destroy(D.discard_before[d]);
        if (D.discard_after[d]) D.event_destroy(D.discard_after[d]);
        D.discard_stream[d] = NULL;
        D.discard_before[d] = D.discard_after[d] = NULL;
    }
}

static const uvm_prim uvm_prim_cuda = {
    .name = "cuda",
    .alloc_managed = cu_alloc,
    .free_managed = cu_free,
    .prefetch = cu_prefetch,
    .advise = cu_advise,
    .discard = cu_discard,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .device_sync = cu_device_sync,
    .stream_capturing = cu_stream_capturing,
    .shutdown = cu_shutdown,
    .timer_create = cu_timer_create,
    .elapsed_s = cu_elapsed_s,
    .memset_async = cu_memset_async,
    .copy_async = cu_copy_async,
    .mem_info = cu_mem_info,
    .device_name = cu_device_name,
};

const char *uvm_prim_cuda_missing(void) {
    if (!D.event_elapsed) return "cuEventElapsedTime";
    if (!D.memset_d8) return "cuMemsetD8Async";
    if (!D.copy_dtod) return "cuMemcpyDtoDAsync";
    if (!D.mem_get_info) return "cuMemGetInfo";
    if (!D.device_name) return "cuDeviceGetName";
    return NULL;
}

static void *getproc(const char *sym, int version) {
    void *fn = NULL;
    CUresult r;
    if (D.getproc2) {
        int status = 0;
        r = D.getproc2(sym, &fn, version, 0, &status);
        if (status != 0) fn = NULL;
    } else {
        r = D.getproc1(sym, &fn, version, 0);
    }
    return r == CUDA_SUCCESS ? fn : NULL;
}

int uvm_prim_cuda_load(const uvm_prim **out, char *why, size_t why_len) {
    const char *path = getenv("UVM_SCHED_LIBCUDA");
    if (!path || !*path) path = "libcuda.so.1";
    /* Resolved afresh at every (re)start, so a reset sees a changed driver setting; a
     * second dlopen of the same library only bumps its reference count. */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "cannot load the CUDA driver %s: %s", path, dlerror());
        return UVM_ENOBACKEND;
    }
    if (D.lib) cu_shutdown(); /* a start that failed after loading was never reset */
    memset(&D, 0, sizeof D);
    D.lib = lib;
    D.getproc2 = (pfn_getproc_v2)dlsym(lib, "cuGetProcAddress_v2");
    if (!D.getproc2) D.getproc1 = (pfn_getproc_v1)dlsym(lib, "cuGetProcAddress");
    *(void **)&D.init = dlsym(lib, "cuInit");
    *(void **)&D.driver_version = dlsym(lib, "cuDriverGetVersion");
    if ((!D.getproc2 && !D.getproc1) || !D.init || !D.driver_version) {
        snprintf(why, why_len, "%s lacks cuGetProcAddress/cuInit (driver older than CUDA 11.3?)",
                 path);
        goto fail;
    }
    CUresult r = D.init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, why_len, "cuInit failed with %d (no usable GPU or driver)", r);
        goto fail;
    }
    D.driver_version(&D.version);
    struct {
        const char *sym;
        int version;
        void **slot;
        int required;
    } want[] = {
        {"cuGetErrorName", 6000, (void **)&D.error_name, 1},
        {"cuDeviceGetCount", 2000, (void **)&D.device_count, 1},
        {"cuDeviceGet", 2000, (void **)&D.device_get, 1},
        {"cuDevicePrimaryCtxRetain", 7000, (void **)&D.primary_retain, 1},
        {"cuDevicePrimaryCtxRelease", 11000, (void **)&D.primary_release, 0},
        {"cuCtxGetCurrent", 4000, (void **)&D.ctx_get, 1},
        {"cuCtxSetCurrent", 4000, (void **)&D.ctx_set, 1},
        {"cuCtxGetDevice", 2000, (void **)&D.ctx_get_device, 1},
        {"cuMemAllocManaged", 6000, (void **)&D.alloc_managed, 1},
        {"cuMemFree", 3020, (void **)&D.mem_free, 1},
        {"cuStreamCreate", 2000, (void **)&D.stream_create, 1},
        {"cuStreamDestroy", 4000, (void **)&D.stream_destroy, 1},
        {"cuEventCreate", 2000, (void **)&D.event_create, 1},
        {"cuEventDestroy", 4000, (void **)&D.event_destroy, 1},
        {"cuEventRecord", 2000, (void **)&D.event_record, 1},
        {"cuStreamWaitEvent", 3020, (void **)&D.stream_wait_event, 1},
        {"cuEventQuery", 2000, (void **)&D.event_query, 1},
        {"cuEventSynchronize", 2000, (void **)&D.event_sync, 1},
        {"cuCtxSynchronize", 2000, (void **)&D.ctx_sync, 1},
        {"cuMemDiscardBatchAsync", 13000, (void **)&D.discard_batch, 0},
        {"cuStreamIsCapturing", 10000, (void **)&D.stream_is_capturing, 0},
        /* cuda.h maps cuEventElapsedTime to its _v2 (CUDA 12.8): same signature */
        {"cuEventElapsedTime", 2000, (void **)&D.event_elapsed, 0},
        {"cuMemsetD8Async", 3020, (void **)&D.memset_d8, 0},
        {"cuMemcpyDtoDAsync", 3020, (void **)&D.copy_dtod, 0},
        {"cuMemGetInfo", 3020, (void **)&D.mem_get_info, 0},
        {"cuDeviceGetName", 2000, (void **)&D.device_name, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        *want[i].slot = getproc(want[i].sym, want[i].version);
        if (!*want[i].slot && want[i].required) {
            snprintf(why, why_len, "driver %d has no %s (ABI %d)", D.version, want[i].sym,
                     want[i].version);
            goto fail;
        }
    }
    if (D.version >= 12080) { /* the form cuda.h names since CUDA 12.8 */
        void *v2 = getproc("cuEventElapsedTime", 12080);
        if (v2) *(void **)&D.event_elapsed = v2;
    }
    if (D.version >= 12020) {
        *(void **)&D.prefetch_v2 = getproc("cuMemPrefetchAsync", 12020);
        *(void **)&D.advise_v2 = getproc("cuMemAdvise", 12020);
    }
    if (!D.prefetch_v2 || !D.advise_v2) {
        D.prefetch_v2 = NULL;
        D.advise_v2 = NULL;
        *(void **)&D.prefetch_v1 = getproc("cuMemPrefetchAsync", 8000);
        *(void **)&D.advise_v1 = getproc("cuMemAdvise", 8000);
        if (!D.prefetch_v1 || !D.advise_v1) {
            snprintf(why, why_len, "driver %d has no cuMemPrefetchAsync/cuMemAdvise", D.version);
            goto fail;
        }
    }
    r = D.device_count(&D.n_devices);
    if (r != CUDA_SUCCESS || D.n_devices <= 0) {
        snprintf(why, why_len, "the CUDA driver %d sees no device", D.version);
        goto fail;
    }
    snprintf(why, why_len, "CUDA driver %d.%d from %s, %d device(s)%s", D.version / 1000,
             (D.version % 1000) / 10, path, D.n_devices,
             D.discard_batch ? "" : ", no discard (needs a CUDA 13 driver)");
    *out = &uvm_prim_cuda;
    return UVM_OK;
fail:
    /* keep dlclose out: a half-initialised driver is safer left loaded */
    memset(&D, 0, sizeof D);
    return UVM_ENOBACKEND;
}
