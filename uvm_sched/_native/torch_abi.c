/* What PyTorch's CUDAPluggableAllocator calls, beyond malloc/free (uvm_sched.h):
 *   uvm_sched_torch_malloc_status  malloc, refused on a stream that is capturing a CUDA
 *                                  graph (the shim in torch_shim.cpp turns a refusal
 *                                  into a C++ exception: torch checks no NULL)
 *   uvm_sched_torch_free           free, after the streams record_stream named are done
 *   uvm_sched_torch_record_stream  torch.Tensor.record_stream: the block is used on
 *                                  another stream too
 *   uvm_sched_torch_empty_cache    torch.cuda.empty_cache(): cached arenas go back
 *
 * Graph capture: a capture would see cuMemAllocManaged, event records and host waits,
 * which capture refuses (or which would be baked into the graph); the allocator has no
 * graph-private pool, so capture is refused with a clear error at the first allocation.
 * record_stream: torch's own allocator defers the free with events; ours waits on the host
 * for the recorded streams at free (record_stream is rare: side streams of NCCL, copies),
 * which is slower but can never hand the memory to another stream too early. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rec {
    void *ptr, *stream;
    int device;
} *recs;
static size_t n_recs, cap_recs;
static _Atomic size_t any_recs; /* the free path's one-load check */

UVM_API int uvm_sched_torch_malloc_status(size_t size, int device, void *stream, void **out) {
    if (!out) return UVM_EINVAL;
    *out = NULL;
    pthread_mutex_lock(&uvm_g.lock);
    const uvm_prim *prim = uvm_g.ready ? uvm_g.prim : NULL;
    pthread_mutex_unlock(&uvm_g.lock);
    if (!prim) {
        uvm_sched_backend_name(); /* starts the library */
        pthread_mutex_lock(&uvm_g.lock);
        prim = uvm_g.ready ? uvm_g.prim : NULL;
        pthread_mutex_unlock(&uvm_g.lock);
    }
    if (prim && prim->stream_capturing && size) {
        int c = prim->stream_capturing(device, stream);
        if (c == 1) {
            uvm_set_error("malloc of %zu bytes on stream %p, which is capturing a CUDA graph: "
                          "uvm_sched does not support graph capture (managed allocation, "
                          "prefetch and event waits cannot be captured); capture with "
                          "PyTorch's own allocator, or run the model uncaptured",
                          size, stream);
            return UVM_EUNSUPPORTED;
        }
        if (c < 0) return c;
    }
    return uvm_sched_malloc_status(size, device, stream, out);
}

UVM_API void uvm_sched_torch_record_stream(void *ptr, void *stream) {
    if (!ptr) return;
    uint64_t size = 0, ordinal = 0, owner = 0;
    if (uvm_sched_block_info(ptr, &size, &ordinal, &owner) != UVM_OK) {
        uvm_log("record_stream of %p, which is no live block of this allocator: ignored", ptr);
        return;
    }
    pthread_mutex_lock(&uvm_g.lock);
    uvm_block b;
    int device = uvm_pool_lookup(&uvm_g.pool, ptr, &b) == UVM_OK ? b.device : 0;
    pthread_mutex_unlock(&uvm_g.lock);
    pthread_mutex_lock(&rec_lock);
    for (size_t i = 0; i < n_recs; i++)
        if (recs[i].ptr == ptr && recs[i].stream == stream) {
            pthread_mutex_unlock(&rec_lock);
            return;
        }
    if (n_recs == cap_recs) {
        size_t cap = cap_recs ? cap_recs * 2 : 64;
        struct rec *r = realloc(recs, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&rec_lock);
            /* cannot remember it: wait now for what is queued; later work on that stream
             * is the caller's to order (logged: rare, and out of host memory anyway) */
            uvm_log("record_stream of %p: out of host memory, synchronising now", ptr);
            uvm_sched_synchronize(stream, device);
            return;
        }
        recs = r;
        cap_recs = cap;
    }
    recs[n_recs++] = (struct rec){ptr, stream, device};
    atomic_store(&any_recs, n_recs);
    pthread_mutex_unlock(&rec_lock);
}

UVM_API void uvm_sched_torch_free(void *ptr, size_t size, int device, void *stream) {
    if (ptr && atomic_load(&any_recs)) {
        for (;;) { /* the recorded streams of ptr, one at a time, waited on unlocked */
            struct rec r = {NULL, NULL, 0};
            pthread_mutex_lock(&rec_lock);
            for (size_t i = 0; i < n_recs; i++)
                if (recs[i].ptr == ptr) {
                    r = recs[i];
                    recs[i] = recs[--n_recs];
                    break;
                }
            atomic_store(&any_recs, n_recs);
            pthread_mutex_unlock(&rec_lock);
            if (!r.ptr) break;
            int s = uvm_sched_synchronize(r.stream, r.device);
            if (s != UVM_OK)
                uvm_log("free of %p: waiting for its recorded stream %p failed (%s)", ptr,
                        r.stream, uvm_sched_last_error());
        }
    }
    uvm_sched_free(ptr, size, device, stream);
}

UVM_API void uvm_sched_torch_empty_cache(void) { uvm_sched_release_cached(); }
