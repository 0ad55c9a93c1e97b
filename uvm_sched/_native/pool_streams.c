/* The pool's streams: a slot per (stream, device) with the free runs and partial slabs
 * it owns, reclaim (other streams' free memory made anyone's), and slabs of small blocks
 * (pool.c has the design; the caller holds the global lock). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* ---- streams ---------------------------------------------------------------------------- */

/* Note [Streams that go away]
 * The application makes and destroys streams as it likes (CuPy and Numba make them per
 * task), and may destroy one while we still cache memory freed on it, or free a block
 * after its stream is gone.  cuda.h, cuStreamDestroy: "in case the device is still doing
 * work in the stream hStream when cuStreamDestroy() is called, the function will return
 * immediately and the resources associated with hStream will be released automatically
 * once the device has completed all work in hStream"; a destroyed handle may not be
 * passed to the driver again.  So:
 *   - a slot's handle is a key only: the pool passes a stream to the driver only in the
 *     call that gave it (a cross-stream free waits on the freeing stream), never later.
 *     (A free that names no stream stands for the block's allocation stream, which the
 *     caller promises still exists: api.c orders the armed executor's actions after it;
 *     the CuPy adapter keeps the stream alive with the block for that);
 *   - reclaim waits for the whole device (cuCtxSynchronize: "all preceding requested
 *     tasks"), which also covers the work of streams destroyed since, instead of an event
 *     recorded on each slot's stream;
 *   - a slot that owns nothing (no live block, no free page, no slab) is handed to the
 *     next new stream when all are taken, and reclaim makes owned memory untagged, so any
 *     number of streams over time is served while fewer than UVM_MAX_STREAMS hold memory;
 *   - a handle value the driver reuses for a new stream finds the old stream's slot and
 *     its cached memory at once.  That is safe when the value is among "the resources
 *     associated with hStream", released only once the device has completed its work;
 *     cuda.h does not say so in as many words, and this is the one thing we rely on. */

/* A slot that owns nothing: no live block, no free pages, no slab (NULL if none). */
static uvm_stream_slot *idle_slot(uvm_pool *p) {
    for (int i = 1; i < UVM_MAX_STREAMS; i++) {
        uvm_stream_slot *S = &p->streams[i];
        if (S->live || S->free_pages) continue;
        bool slabs = false;
        for (int c = 0; c < UVM_NCLASSES && !slabs; c++) slabs = S->partial[c] != NULL;
        if (!slabs) return S;
    }
    return NULL;
}

/* The slot of (stream handle, device), made on first use (Note [Streams that go away]).
 * Slots are never unused again (the loops over them stop at the first unused one); when
 * all are taken, one that owns nothing is given to the new stream. */
int uvm_slot_of(uvm_pool *p, void *handle, int device) {
    int s = p->last_slot;
    if (s && p->streams[s].handle == handle && p->streams[s].device == device) return s;
    for (int i = 1; i < UVM_MAX_STREAMS; i++) {
        uvm_stream_slot *S = &p->streams[i];
        if (!S->used) {
            S->bins = calloc(1, sizeof *S->bins);
            if (!S->bins) {
                uvm_set_error("out of host memory for stream bins");
                return -1;
            }
            S->used = true;
            S->handle = handle;
            S->device = device;
            p->last_slot = i;
            return i;
        }
        if (S->handle == handle && S->device == device) {
            p->last_slot = i;
            return i;
        }
    }
    /* all taken: free the empty slabs, then (after a device wait) the cached pages */
    uvm_release_empty_slabs(p, -1);
    uvm_stream_slot *S = idle_slot(p);
    if (!S) {
        uvm_reclaim(p, -1);
        S = idle_slot(p);
    }
    if (!S) {
        uvm_set_error("more than %d streams hold memory of this allocator at once",
                      UVM_MAX_STREAMS - 1);
        return -1;
    }
    S->handle = handle;
    S->device = device;
    p->last_slot = (int)(S - p->streams);
    return p->last_slot;
}

void *uvm_pool_stream_handle(uvm_pool *p, int slot) { return p->streams[slot].handle; }

static int device_ok(int device) {
    if (device >= 0 && device < UVM_MAX_DEVICES) return UVM_OK;
    uvm_set_error("device %d is outside 0..%d", device, UVM_MAX_DEVICES - 1);
    return UVM_EINVAL;
}

/* Wait for the work queued so far on stream (of device), a stream the caller gave in this
 * very call (so it exists): UVM_OK, or the driver's status. */
int uvm_wait_stream(uvm_pool *p, void *stream, int device) {
    if (device_ok(device) != UVM_OK) return UVM_EINVAL;
    void **ev = &p->sync_event[device];
    int s = *ev ? UVM_OK : p->prim->event_create(device, ev);
    if (s != UVM_OK) {
        *ev = NULL;
        return s;
    }
    s = p->prim->event_record(*ev, stream);
    return s == UVM_OK ? p->prim->event_sync(*ev) : s;
}

/* Make the free memory of every other stream usable by anyone: wait until each device
 * holding some has finished its queued work (Note [Streams that go away]; once per device
 * per reclaim), then retag those runs untagged.  Empty slabs go first. */
void uvm_reclaim(uvm_pool *p, int slot) {
    uvm_release_empty_slabs(p, -1);
    signed char waited[UVM_MAX_DEVICES] = {0}; /* 1: done, -1: failed */
    for (int t = 1; t < UVM_MAX_STREAMS && p->streams[t].used; t++) {
        uvm_stream_slot *T = &p->streams[t];
        if (t == slot || T->free_pages == 0) continue;
        int d = T->device;
        if (device_ok(d) != UVM_OK) {
            p->st.err_driver++;
            continue;
        }
        if (!waited[d]) waited[d] = p->prim->device_sync(d) == UVM_OK ? 1 : -1;
        if (waited[d] < 0) {
            p->st.err_driver++;
            continue;
        }
        for (int b = 0; b < UVM_NBINS; b++) {
            uvm_run *r;
            while ((r = T->bins->bin[b]) != NULL) {
                uvm_bin_remove(T->bins, r);
                T->free_pages -= r->npages;
                uvm_run_make_free(p, r, 0, true);
            }
        }
        p->st.reclaims++;
    }
}

/* ---- slabs ------------------------------------------------------------------------------ */
void uvm_slab_unlink(uvm_pool *p, uvm_slab *sl) {
    uvm_slab **head = &p->streams[sl->stream].partial[sl->cls];
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        *head = sl->next;
    if (sl->next) sl->next->prev = sl->prev;
    sl->prev = sl->next = NULL;
    sl->in_list = false;
}

void uvm_slab_push(uvm_pool *p, uvm_slab *sl) {
    uvm_slab **head = &p->streams[sl->stream].partial[sl->cls];
    sl->prev = NULL;
    sl->next = *head;
    if (*head) (*head)->prev = sl;
    *head = sl;
    sl->in_list = true;
}

void uvm_slab_destroy(uvm_pool *p, uvm_slab *sl) {
    if (sl->in_list) uvm_slab_unlink(p, sl);
    uvm_run *r = sl->run;
    int tag = sl->stream;
    free(sl);
    p->st.slabs--;
    uvm_give_pages(p, r, tag);
}

void uvm_release_empty_slabs(uvm_pool *p, int except_slot) {
    for (int t = 1; t < UVM_MAX_STREAMS && p->streams[t].used; t++) {
        if (t == except_slot) continue;
        for (int c = 0; c < UVM_NCLASSES; c++) {
            uvm_slab *sl = p->streams[t].partial[c];
            while (sl) {
                uvm_slab *nx = sl->next;
                if (sl->nfree == sl->nslots) uvm_slab_destroy(p, sl);
                sl = nx;
            }
        }
    }
}

int uvm_slab_new(uvm_pool *p, int slot, int cls, int device, uvm_slab **out) {
    uvm_run *r;
    int s = uvm_take_pages(p, 1, slot, device, &r);
    if (s != UVM_OK) return s;
    uint64_t csize = uvm_class_size(cls);
    uint32_t nslots = (uint32_t)(UVM_PAGE / csize);
    uvm_slab *sl = malloc(sizeof *sl + (size_t)nslots * (sizeof(uint32_t) + sizeof(uint64_t)));
    if (!sl) {
        uvm_give_pages(p, r, slot);
        uvm_set_error("out of host memory for a slab");
        return UVM_ENOMEM;
    }
    memset(sl, 0, sizeof *sl);
    sl->ordinal = (uint64_t *)(sl + 1);
    sl->req = (uint32_t *)(sl->ordinal + nslots);
    sl->run = r;
    sl->cls = (uint32_t)cls;
    sl->csize = (uint32_t)csize;
    sl->nslots = nslots;
    sl->nfree = nslots;
    sl->stream = slot;
    /* bits past the last slot read as used, so the search never hands them out */
    for (uint32_t w = 0; w < 64; w++) {
        uint32_t lo = w * 64;
        if (lo >= nslots)
            sl->used[w] = ~0ull;
        else if (nslots - lo < 64)
            sl->used[w] = ~0ull << (nslots - lo);
    }
    r->state = RUN_SLAB;
    r->stream = slot;
    r->slab = sl;
    p->st.slabs++;
    uvm_slab_push(p, sl);
    *out = sl;
    return UVM_OK;
}
