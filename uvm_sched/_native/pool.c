/* The pool: a caching sub-allocator over a few large managed reservations ("arenas").
 *
 * Managed memory is only backed when touched, so reserving big arenas is cheap; what
 * matters is placement.  The driver migrates and evicts in 2 MiB VA blocks ("pages" here),
 * so:
 *   - a request above 1 MiB gets whole pages of its own, 2 MiB aligned: prefetching or
 *     evicting one large block never drags a neighbour along;
 *   - smaller requests are rounded to one of 40 size classes (512 B steps up to 4 KiB,
 *     then 4 classes per power of two) and packed into slabs of one page per
 *     (stream, class).
 * All metadata lives in host memory, never inside the managed blocks: touching a block
 * from the CPU would migrate it.
 *
 * Free page runs are kept in size bins (exact up to 64 pages, then 4 per power of two)
 * per stream.  Stream-aware reuse, like PyTorch's caching allocator: memory freed on
 * stream S goes back to S's bins and is reused by S immediately (stream order makes that
 * safe); fresh memory is untagged and usable by anyone; another stream T gets S's memory
 * only when T cannot be served otherwise, after the device has finished the work queued
 * so far ("reclaim"; pool_streams.c, Note [Streams that go away]).  Adjacent free runs
 * coalesce when their tags allow (same stream, or one of them untagged: the merged run
 * keeps the stream tag, which is the conservative choice).  A request that finds no free
 * run climbs a ladder (pool_pages.c, uvm_take_pages): find, then reclaim and find, then
 * release the empty arenas and find.
 *
 * Files: this one (size classes and the entry points api.c calls), pool_pages.c (bins,
 * runs, arenas, the ladder), pool_streams.c (stream slots, reclaim, slabs), pool_check.c
 * (uvm_pool_is_valid); pool.h declares what they share.  The caller (api.c) holds the
 * global lock around every entry point.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* ---- size classes ------------------------------------------------------------------- */
int uvm_size_class(uint64_t s) {
    if (s > UVM_SMALL_MAX) return -1;
    if (s <= 4096) return s <= 512 ? 0 : (int)((s + 511) / 512) - 1;
    int e = 63 - __builtin_clzll(s - 1); /* 2^e < s <= 2^(e+1), e >= 12 */
    uint64_t q = (s + ((1ull << (e - 2)) - 1)) >> (e - 2); /* 5..8 */
    return 8 + (e - 12) * 4 + (int)(q - 5);
}

uint64_t uvm_class_size(int c) {
    if (c < 8) return (uint64_t)(c + 1) * 512;
    int e = 12 + (c - 8) / 4;
    uint64_t q = 5 + (uint64_t)((c - 8) % 4);
    return q << (e - 2);
}

/* ---- public (to api.c) -------------------------------------------------------------- */
int uvm_pool_init(uvm_pool *p, const uvm_prim *prim) {
    memset(p, 0, sizeof *p);
    p->prim = prim;
    p->arena_bytes = (uint64_t)1 << 30;
    p->limit_bytes = UINT64_MAX;
    p->streams[0].used = true;
    p->streams[0].bins = calloc(1, sizeof(uvm_bins));
    if (!p->streams[0].bins) return UVM_ENOMEM;
    return UVM_OK;
}

void uvm_pool_fini(uvm_pool *p) {
    /* every slab sits in a run of some arena, in a partial list or not */
    for (size_t i = 0; i < p->n_arenas; i++) {
        uvm_arena *a = p->arenas[i];
        for (uint64_t pg = 0; pg < a->npages; pg++) {
            uvm_run *r = a->head[pg];
            if (!r) continue;
            if (r->state == RUN_SLAB) free(r->slab);
            free(r);
        }
        p->prim->free_managed(a->raw, a->raw_bytes);
        free(a->head);
        free(a->tail);
        free(a->discarded);
        free(a);
    }
    free(p->arenas);
    for (int t = 0; t < UVM_MAX_STREAMS; t++) free(p->streams[t].bins);
    uvm_run *r = p->run_free_list;
    while (r) {
        uvm_run *nx = r->next;
        free(r);
        r = nx;
    }
    for (int d = 0; d < UVM_MAX_DEVICES; d++)
        if (p->sync_event[d]) p->prim->event_destroy(p->sync_event[d]);
    memset(p, 0, sizeof *p);
}

int uvm_pool_malloc(uvm_pool *p, size_t size, int device, void *stream, uvm_block *b) {
    if (UVM_UNLIKELY(size > ((uint64_t)1 << 50))) {
        uvm_set_error("a request of %zu bytes is larger than any device could hold", size);
        return UVM_ENOMEM;
    }
    int slot = uvm_slot_of(p, stream, device);
    if (UVM_UNLIKELY(slot < 0)) return UVM_EINVAL;
    int cls = uvm_size_class(size);
    uint64_t ord = p->next_ordinal;
    char *addr;
    if (cls >= 0) {
        uvm_slab *sl = p->streams[slot].partial[cls];
        if (UVM_UNLIKELY(!sl)) {
            int s = uvm_slab_new(p, slot, cls, device, &sl);
            if (s != UVM_OK) return s;
        }
        uint32_t w = sl->hint;
        while (sl->used[w] == ~0ull) w++;
        uint32_t bit = (uint32_t)__builtin_ctzll(~sl->used[w]);
        sl->used[w] |= 1ull << bit;
        sl->hint = w;
        uint32_t idx = w * 64 + bit;
        if (--sl->nfree == 0) uvm_slab_unlink(p, sl);
        sl->req[idx] = (uint32_t)size;
        sl->ordinal[idx] = ord;
        addr = sl->run->arena->base + sl->run->first * UVM_PAGE + (uint64_t)idx * sl->csize;
        b->capacity = sl->csize;
    } else {
        uint64_t n = (size + UVM_PAGE - 1) >> UVM_PAGE_SHIFT;
        uvm_run *r;
        int s = uvm_take_pages(p, n, slot, device, &r);
        if (s != UVM_OK) return s;
        r->state = RUN_LARGE;
        r->stream = slot;
        r->req = size;
        r->ordinal = ord;
        addr = r->arena->base + r->first * UVM_PAGE;
        b->capacity = n * UVM_PAGE;
    }
    p->next_ordinal = ord + 1;
    p->st.n_malloc++;
    p->st.allocated_blocks++;
    p->st.allocated_bytes += size;
    if (p->st.allocated_bytes > p->st.peak_allocated_bytes)
        p->st.peak_allocated_bytes = p->st.allocated_bytes;
    p->streams[slot].live++;
    b->addr = addr;
    b->req = size;
    b->ordinal = ord;
    b->stream = slot;
    b->device = device;
    return UVM_OK;
}

/* Locate ptr: *run is the run holding it; returns UVM_OK for the start of a live block
 * (and *slot_idx for a small one), UVM_EDOUBLEFREE for a block start that is not
 * allocated, UVM_EUNKNOWN for anything else. */
static int locate(uvm_pool *p, void *ptr, uvm_run **run, uint32_t *slot_idx) {
    uvm_arena *a = uvm_find_arena(p, (uintptr_t)ptr);
    if (!a) return UVM_EUNKNOWN;
    uint64_t off = (uint64_t)((char *)ptr - a->base);
    uint64_t pg = off >> UVM_PAGE_SHIFT;
    uvm_run *r = a->head[pg];
    if (UVM_UNLIKELY(!r)) {
        /* inside a run that starts earlier: find it (error path only) */
        uint64_t i = pg;
        while (i > 0 && !a->head[i]) i--;
        r = a->head[i];
        *run = r;
        if (r && r->state == RUN_FREE && (off & (UVM_PAGE - 1)) == 0) return UVM_EDOUBLEFREE;
        return UVM_EUNKNOWN;
    }
    *run = r;
    uint64_t in = off - pg * UVM_PAGE;
    if (r->state == RUN_SLAB) {
        uvm_slab *sl = r->slab;
        uint32_t idx = (uint32_t)in / sl->csize;
        if ((uint32_t)in != idx * sl->csize || idx >= sl->nslots) return UVM_EUNKNOWN;
        *slot_idx = idx;
        return (sl->used[idx >> 6] >> (idx & 63)) & 1 ? UVM_OK : UVM_EDOUBLEFREE;
    }
    if (in != 0) return UVM_EUNKNOWN;
    return r->state == RUN_LARGE ? UVM_OK : UVM_EDOUBLEFREE;
}

int uvm_pool_lookup(uvm_pool *p, void *ptr, uvm_block *b) {
    uvm_run *r = NULL;
    uint32_t idx = 0;
    int s = locate(p, ptr, &r, &idx);
    if (s != UVM_OK) return s;
    b->addr = ptr;
    if (r->state == RUN_SLAB) {
        b->req = r->slab->req[idx];
        b->ordinal = r->slab->ordinal[idx];
        b->stream = r->slab->stream;
        b->capacity = r->slab->csize;
    } else {
        b->req = r->req;
        b->ordinal = r->ordinal;
        b->stream = r->stream;
        b->capacity = r->npages * UVM_PAGE;
    }
    b->device = p->streams[b->stream].device;
    return UVM_OK;
}

int uvm_pool_check_range(uvm_pool *p, const void *ptr, uint64_t bytes) {
    uintptr_t x = (uintptr_t)ptr;
    uvm_arena *a = uvm_find_arena(p, x);
    if (!a) {
        uvm_set_error("%p is not in memory reserved by uvm_sched (%zu reservations)", ptr,
                      p->n_arenas);
        return UVM_EUNKNOWN;
    }
    uintptr_t end = (uintptr_t)a->base + a->npages * UVM_PAGE;
    if (bytes > end - x) {
        uvm_set_error("[%p, +%llu bytes) runs %llu bytes past the end of its reservation "
                      "(%p, %llu bytes)", ptr, (unsigned long long)bytes,
                      (unsigned long long)(bytes - (end - x)), (void *)a->base,
                      (unsigned long long)(a->npages * UVM_PAGE));
        return UVM_EUNKNOWN;
    }
    return UVM_OK;
}

int uvm_pool_owner(uvm_pool *p, const void *ptr, uvm_block *b) {
    uvm_arena *a = uvm_find_arena(p, (uintptr_t)ptr);
    if (!a) return UVM_EUNKNOWN;
    uint64_t i = (uint64_t)((const char *)ptr - a->base) >> UVM_PAGE_SHIFT;
    while (i > 0 && !a->head[i]) i--; /* the run holding page i starts at or before it */
    uvm_run *r = a->head[i];
    if (!r) return UVM_EUNKNOWN;
    if (r->state == RUN_FREE) return UVM_EDOUBLEFREE;
    if (r->state == RUN_SLAB) {
        uvm_slab *sl = r->slab;
        uint64_t in = (uint64_t)((const char *)ptr - (a->base + r->first * UVM_PAGE));
        uint32_t idx = (uint32_t)(in / sl->csize);
        if (idx >= sl->nslots || !((sl->used[idx >> 6] >> (idx & 63)) & 1)) return UVM_EDOUBLEFREE;
        b->addr = a->base + r->first * UVM_PAGE + (uint64_t)idx * sl->csize;
        b->req = sl->req[idx];
        b->ordinal = sl->ordinal[idx];
        b->stream = sl->stream;
        b->capacity = sl->csize;
    } else {
        b->addr = a->base + r->first * UVM_PAGE;
        b->req = r->req;
        b->ordinal = r->ordinal;
        b->stream = r->stream;
        b->capacity = r->npages * UVM_PAGE;
    }
    b->device = p->streams[b->stream].device;
    return UVM_OK;
}

int uvm_pool_free(uvm_pool *p, void *ptr, size_t size, int device, void *stream, int own_stream,
                  uvm_block *b) {
    uvm_run *r = NULL;
    uint32_t idx = 0;
    int s = locate(p, ptr, &r, &idx);
    if (UVM_UNLIKELY(s != UVM_OK)) {
        char given[48] = "";
        if (size != UVM_SIZE_ANY) snprintf(given, sizeof given, " with size %zu", size);
        if (s == UVM_EDOUBLEFREE) {
            p->st.err_double_free++;
            uvm_set_error("double free detected of block %p%s", ptr, given);
        } else {
            p->st.err_unknown++;
            uvm_set_error("free of %p%s: not the start of a block this allocator gave out",
                          ptr, given);
        }
        return s;
    }
    b->addr = ptr;
    int owner;
    if (r->state == RUN_SLAB) {
        uvm_slab *sl = r->slab;
        b->req = sl->req[idx];
        b->ordinal = sl->ordinal[idx];
        b->capacity = sl->csize;
        owner = sl->stream;
    } else {
        b->req = r->req;
        b->ordinal = r->ordinal;
        b->capacity = r->npages * UVM_PAGE;
        owner = r->stream;
    }
    b->device = p->streams[owner].device;
    b->stream = owner;
    if (UVM_UNLIKELY(size != UVM_SIZE_ANY && size != b->req)) {
        p->st.err_size++;
        uvm_set_error("free of block %p with size %zu, but it was allocated with %llu bytes", ptr,
                      size, (unsigned long long)b->req);
        return UVM_ESIZE;
    }
    int tag = owner;
    if (!own_stream) {
        /* the stream is one of the block's device (a free names no other; the caller's
         * device argument may be a default) */
        (void)device;
        device = b->device;
        int user = uvm_slot_of(p, stream, device);
        if (user > 0 && user != owner) {
            /* last used on another stream: a large block simply becomes that stream's
             * free memory; a slot of a slab (owned by its stream) waits for the user
             * stream first.  Rare: PyTorch frees on the allocation stream. */
            p->st.cross_stream_frees++;
            if (r->state == RUN_SLAB) {
                if (uvm_wait_stream(p, stream, device) != UVM_OK) {
                    /* without the wait the slot could be handed out while that stream
                     * still uses it: the block stays allocated (a leak, never a race) */
                    p->st.err_driver++;
                    return UVM_EDRIVER;
                }
            } else {
                tag = user;
            }
        }
    }
    if (r->state == RUN_SLAB) {
        uvm_slab *sl = r->slab;
        sl->used[idx >> 6] &= ~(1ull << (idx & 63));
        if ((idx >> 6) < sl->hint) sl->hint = idx >> 6;
        sl->nfree++;
        if (!sl->in_list) uvm_slab_push(p, sl);
        if (sl->nfree == sl->nslots) {
            /* keep one empty slab per (stream, class) to absorb alloc/free ping-pong */
            uvm_slab *head = p->streams[sl->stream].partial[sl->cls];
            if (head != sl || sl->next) uvm_slab_destroy(p, sl);
        }
    } else {
        uvm_give_pages(p, r, tag);
    }
    p->streams[owner].live--;
    p->st.n_free++;
    p->st.allocated_blocks--;
    p->st.allocated_bytes -= b->req;
    return UVM_OK;
}
