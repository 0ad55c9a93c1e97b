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
 * so far ("reclaim", see Note [Streams that go away]).  Adjacent free runs coalesce when their tags allow (same stream, or one of
 * them untagged: the merged run keeps the stream tag, which is the conservative choice).
 *
 * The caller (api.c) holds the global lock around every entry point.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* ---- bins of free runs --------------------------------------------------------------- */
static int bin_of(uint64_t n) {
    if (n <= 64) return (int)n - 1;
    int e = 63 - __builtin_clzll(n);
    int b = 64 + (e - 6) * 4 + (int)((n >> (e - 2)) & 3);
    return b < UVM_NBINS ? b : UVM_NBINS - 1;
}

static void bin_insert(uvm_bins *B, uvm_run *r) {
    int b = bin_of(r->npages);
    r->prev = NULL;
    r->next = B->bin[b];
    if (r->next) r->next->prev = r;
    B->bin[b] = r;
    B->bitmap[b >> 6] |= 1ull << (b & 63);
}

static void bin_remove(uvm_bins *B, uvm_run *r) {
    int b = bin_of(r->npages);
    if (r->prev)
        r->prev->next = r->next;
    else
        B->bin[b] = r->next;
    if (r->next) r->next->prev = r->prev;
    if (!B->bin[b]) B->bitmap[b >> 6] &= ~(1ull << (b & 63));
    r->prev = r->next = NULL;
}

static uvm_run *bin_find(uvm_bins *B, uint64_t n) {
    int b = bin_of(n);
    uvm_run *best = NULL;
    int scanned = 0;
    /* best fit among the first few of the own bin (log bins hold mixed sizes) */
    for (uvm_run *r = B->bin[b]; r && scanned < 16; r = r->next, scanned++) {
        if (r->npages >= n && (!best || r->npages < best->npages)) {
            best = r;
            if (r->npages == n) break;
        }
    }
    if (best) return best;
    for (int i = b + 1; i < UVM_NBINS;) {
        uint64_t m = B->bitmap[i >> 6] & (~0ull << (i & 63));
        if (m) return B->bin[(i & ~63) + __builtin_ctzll(m)];
        i = (i & ~63) + 64;
    }
    return NULL;
}

/* ---- runs ------------------------------------------------------------------------------ */
static uvm_run *run_new(uvm_pool *p) {
    uvm_run *r = p->run_free_list;
    if (r)
        p->run_free_list = r->next;
    else
        r = malloc(sizeof *r);
    if (r) memset(r, 0, sizeof *r);
    return r;
}

static void run_recycle(uvm_pool *p, uvm_run *r) {
    r->next = p->run_free_list;
    p->run_free_list = r;
}

static void set_bounds(uvm_run *r) {
    r->arena->head[r->first] = r;
    r->arena->tail[r->first + r->npages - 1] = r;
}

static void clear_bounds(uvm_run *r) {
    uvm_arena *a = r->arena;
    if (a->head[r->first] == r) a->head[r->first] = NULL;
    if (a->tail[r->first + r->npages - 1] == r) a->tail[r->first + r->npages - 1] = NULL;
}

static uvm_bins *bins_of(uvm_pool *p, int slot) { return p->streams[slot].bins; }

static bool tags_merge(int a, int b) { return a == b || a == 0 || b == 0; }

/* Put a run back as free memory tagged `tag`, merging with free neighbours whose tags
 * allow it (only_untagged: merge with untagged neighbours only, for reclaim). */
static void run_make_free(uvm_pool *p, uvm_run *r, int tag, bool only_untagged) {
    uvm_arena *a = r->arena;
    r->state = RUN_FREE;
    r->stream = tag;
    r->slab = NULL;
    uvm_run *L = r->first > 0 ? a->tail[r->first - 1] : NULL;
    uvm_run *R = r->first + r->npages < a->npages ? a->head[r->first + r->npages] : NULL;
    clear_bounds(r);
    if (L && L->state == RUN_FREE &&
        (only_untagged ? L->stream == 0 : tags_merge(L->stream, r->stream))) {
        bin_remove(bins_of(p, L->stream), L);
        p->streams[L->stream].free_pages -= L->npages;
        clear_bounds(L);
        if (r->stream == 0) r->stream = L->stream;
        r->first = L->first;
        r->npages += L->npages;
        run_recycle(p, L);
    }
    if (R && R->state == RUN_FREE &&
        (only_untagged ? R->stream == 0 : tags_merge(R->stream, r->stream))) {
        bin_remove(bins_of(p, R->stream), R);
        p->streams[R->stream].free_pages -= R->npages;
        clear_bounds(R);
        if (r->stream == 0) r->stream = R->stream;
        r->npages += R->npages;
        run_recycle(p, R);
    }
    set_bounds(r);
    bin_insert(bins_of(p, r->stream), r);
    p->streams[r->stream].free_pages += r->npages;
}

/* ---- arenas ------------------------------------------------------------------------------ */
static uvm_arena *find_arena(uvm_pool *p, uintptr_t x) {
    uvm_arena *a = p->last_arena;
    if (a && x >= (uintptr_t)a->base && x < (uintptr_t)a->base + a->npages * UVM_PAGE) return a;
    size_t lo = 0, hi = p->n_arenas;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        a = p->arenas[mid];
        if (x < (uintptr_t)a->base)
            hi = mid;
        else if (x >= (uintptr_t)a->base + a->npages * UVM_PAGE)
            lo = mid + 1;
        else {
            p->last_arena = a;
            return a;
        }
    }
    return NULL;
}

static int arena_new(uvm_pool *p, uint64_t min_pages, int device) {
    uint64_t bytes = p->arena_bytes;
    if (bytes < min_pages * UVM_PAGE) bytes = min_pages * UVM_PAGE;
    if (p->st.reserved_bytes + bytes > p->limit_bytes) {
        /* a smaller arena may still fit under the limit */
        uint64_t room = p->limit_bytes > p->st.reserved_bytes
                            ? (p->limit_bytes - p->st.reserved_bytes) / UVM_PAGE * UVM_PAGE
                            : 0;
        if (room < min_pages * UVM_PAGE) {
            uvm_set_error("reserving %llu more bytes would pass the limit of %llu bytes "
                          "(%llu reserved)",
                          (unsigned long long)(min_pages * UVM_PAGE),
                          (unsigned long long)p->limit_bytes,
                          (unsigned long long)p->st.reserved_bytes);
            return UVM_ENOMEM;
        }
        bytes = room;
    }
    void *raw = NULL;
    size_t raw_bytes = bytes;
    int s = p->prim->alloc_managed(device, raw_bytes, &raw);
    if (s == UVM_OK && ((uintptr_t)raw & (UVM_PAGE - 1))) {
        /* not 2 MiB aligned: ask again with a page of slack to align within */
        p->prim->free_managed(raw, raw_bytes);
        raw_bytes = bytes + UVM_PAGE;
        s = p->prim->alloc_managed(device, raw_bytes, &raw);
    }
    if (s != UVM_OK) {
        if (s != UVM_ENOMEM) p->st.err_driver++;
        return s;
    }
    uvm_arena *a = calloc(1, sizeof *a);
    uint64_t npages = bytes / UVM_PAGE;
    uvm_run **head = calloc(npages, sizeof *head);
    uvm_run **tail = calloc(npages, sizeof *tail);
    uvm_run *r = run_new(p);
    if (p->n_arenas == p->cap_arenas) {
        size_t cap = p->cap_arenas ? 2 * p->cap_arenas : 16;
        uvm_arena **arr = realloc(p->arenas, cap * sizeof *arr);
        if (arr) {
            p->arenas = arr;
            p->cap_arenas = cap;
        }
    }
    if (!a || !head || !tail || !r || p->n_arenas == p->cap_arenas) {
        free(a), free(head), free(tail);
        if (r) run_recycle(p, r);
        p->prim->free_managed(raw, raw_bytes);
        uvm_set_error("out of host memory for arena metadata");
        return UVM_ENOMEM;
    }
    a->raw = raw;
    a->raw_bytes = raw_bytes;
    a->base = (char *)(((uintptr_t)raw + UVM_PAGE - 1) & ~(uintptr_t)(UVM_PAGE - 1));
    a->npages = npages;
    a->head = head;
    a->tail = tail;
    size_t i = p->n_arenas;
    while (i > 0 && (uintptr_t)p->arenas[i - 1]->base > (uintptr_t)a->base) {
        p->arenas[i] = p->arenas[i - 1];
        i--;
    }
    p->arenas[i] = a;
    p->n_arenas++;
    p->st.arenas = p->n_arenas;
    p->st.reserved_bytes += bytes;
    if (p->st.reserved_bytes > p->st.peak_reserved_bytes)
        p->st.peak_reserved_bytes = p->st.reserved_bytes;
    r->arena = a;
    r->first = 0;
    r->npages = npages;
    set_bounds(r);
    r->state = RUN_FREE;
    r->stream = 0;
    bin_insert(bins_of(p, 0), r);
    p->streams[0].free_pages += npages;
    return UVM_OK;
}

static int arena_destroy(uvm_pool *p, size_t idx) {
    uvm_arena *a = p->arenas[idx];
    /* the driver first: memory it failed to free is still held, so the arena stays in the
     * pool (usable, and counted as reserved) rather than being reported released */
    if (p->prim->free_managed(a->raw, a->raw_bytes) != UVM_OK) {
        p->st.err_driver++;
        return UVM_EDRIVER;
    }
    /* an empty arena holds only free runs (possibly of several stream tags); the driver's
     * free waits for the device, so no stream can still be using them */
    for (uint64_t pg = 0; pg < a->npages;) {
        uvm_run *r = a->head[pg];
        pg += r->npages;
        bin_remove(bins_of(p, r->stream), r);
        p->streams[r->stream].free_pages -= r->npages;
        run_recycle(p, r);
    }
    uint64_t bytes = a->npages * UVM_PAGE;
    free(a->head);
    free(a->tail);
    if (p->last_arena == a) p->last_arena = NULL;
    free(a);
    memmove(&p->arenas[idx], &p->arenas[idx + 1], (p->n_arenas - idx - 1) * sizeof *p->arenas);
    p->n_arenas--;
    p->st.arenas = p->n_arenas;
    p->st.reserved_bytes -= bytes;
    p->st.arenas_released++;
    p->st.bytes_released += bytes;
    return UVM_OK;
}

/* ---- streams ---------------------------------------------------------------------------- */
static void reclaim(uvm_pool *p, int slot);
static void release_empty_slabs(uvm_pool *p, int except_slot);

/* Note [Streams that go away]
 * The application makes and destroys streams as it likes (CuPy and Numba make them per
 * task), and may destroy one while we still cache memory freed on it, or free a block
 * after its stream is gone.  cuda.h, cuStreamDestroy: "in case the device is still doing
 * work in the stream hStream when cuStreamDestroy() is called, the function will return
 * immediately and the resources associated with hStream will be released automatically
 * once the device has completed all work in hStream"; a destroyed handle may not be
 * passed to the driver again.  So:
 *   - a slot's handle is a key only: the pool passes a stream to the driver only in the
 *     call that gave it (a cross-stream free waits on the freeing stream), never later;
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
static int slot_of(uvm_pool *p, void *handle, int device) {
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
    release_empty_slabs(p, -1);
    uvm_stream_slot *S = idle_slot(p);
    if (!S) {
        reclaim(p, -1);
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
static int wait_stream(uvm_pool *p, void *stream, int device) {
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
static void reclaim(uvm_pool *p, int slot) {
    release_empty_slabs(p, -1);
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
                bin_remove(T->bins, r);
                T->free_pages -= r->npages;
                run_make_free(p, r, 0, true);
            }
        }
        p->st.reclaims++;
    }
}

/* ---- pages ----------------------------------------------------------------------------- */
/* A free run of n pages for slot: its own bins first, then untagged memory, then a new
 * arena.  NULL when none, *s saying why (the driver's status, or UVM_ENOMEM). */
static uvm_run *find_pages(uvm_pool *p, uint64_t n, int slot, int device, int *s) {
    uvm_run *r = bin_find(bins_of(p, slot), n);
    if (!r && slot != 0) r = bin_find(bins_of(p, 0), n);
    if (r) return r;
    *s = arena_new(p, n, device);
    return *s == UVM_OK ? bin_find(bins_of(p, 0), n) : NULL;
}

/* The fallback ladder, like PyTorch's caching allocator: find; else reclaim the other
 * streams' free memory and find; else give back the empty arenas (the limit may have
 * room for one that fits) and find. */
static int take_pages(uvm_pool *p, uint64_t n, int slot, int device, uvm_run **out) {
    int s = UVM_OK;
    uvm_run *r = find_pages(p, n, slot, device, &s);
    if (!r) {
        reclaim(p, slot);
        r = find_pages(p, n, slot, device, &s);
    }
    if (!r) {
        uvm_pool_release_cached(p);
        r = find_pages(p, n, slot, device, &s);
    }
    if (!r) return s != UVM_OK ? s : UVM_ENOMEM;
    int tag = r->stream;
    bin_remove(bins_of(p, tag), r);
    p->streams[tag].free_pages -= r->npages;
    if (r->npages > n) {
        uvm_run *rem = run_new(p);
        if (!rem) { /* put it back; cannot split without a descriptor */
            bin_insert(bins_of(p, tag), r);
            p->streams[tag].free_pages += r->npages;
            uvm_set_error("out of host memory for a run descriptor");
            return UVM_ENOMEM;
        }
        clear_bounds(r);
        rem->arena = r->arena;
        rem->first = r->first + n;
        rem->npages = r->npages - n;
        rem->state = RUN_FREE;
        rem->stream = tag;
        r->npages = n;
        set_bounds(r);
        set_bounds(rem);
        bin_insert(bins_of(p, tag), rem);
        p->streams[tag].free_pages += rem->npages;
    }
    r->arena->used_pages += n;
    p->st.in_use_bytes += n * UVM_PAGE;
    *out = r;
    return UVM_OK;
}

static void give_pages(uvm_pool *p, uvm_run *r, int tag) {
    r->arena->used_pages -= r->npages;
    p->st.in_use_bytes -= r->npages * UVM_PAGE;
    run_make_free(p, r, tag, false);
}

/* ---- slabs ------------------------------------------------------------------------------ */
static void slab_unlink(uvm_pool *p, uvm_slab *sl) {
    uvm_slab **head = &p->streams[sl->stream].partial[sl->cls];
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        *head = sl->next;
    if (sl->next) sl->next->prev = sl->prev;
    sl->prev = sl->next = NULL;
    sl->in_list = false;
}

static void slab_push(uvm_pool *p, uvm_slab *sl) {
    uvm_slab **head = &p->streams[sl->stream].partial[sl->cls];
    sl->prev = NULL;
    sl->next = *head;
    if (*head) (*head)->prev = sl;
    *head = sl;
    sl->in_list = true;
}

static void slab_destroy(uvm_pool *p, uvm_slab *sl) {
    if (sl->in_list) slab_unlink(p, sl);
    uvm_run *r = sl->run;
    int tag = sl->stream;
    free(sl);
    p->st.slabs--;
    give_pages(p, r, tag);
}

static void release_empty_slabs(uvm_pool *p, int except_slot) {
    for (int t = 1; t < UVM_MAX_STREAMS && p->streams[t].used; t++) {
        if (t == except_slot) continue;
        for (int c = 0; c < UVM_NCLASSES; c++) {
            uvm_slab *sl = p->streams[t].partial[c];
            while (sl) {
                uvm_slab *nx = sl->next;
                if (sl->nfree == sl->nslots) slab_destroy(p, sl);
                sl = nx;
            }
        }
    }
}

static int slab_new(uvm_pool *p, int slot, int cls, int device, uvm_slab **out) {
    uvm_run *r;
    int s = take_pages(p, 1, slot, device, &r);
    if (s != UVM_OK) return s;
    uint64_t csize = uvm_class_size(cls);
    uint32_t nslots = (uint32_t)(UVM_PAGE / csize);
    uvm_slab *sl = malloc(sizeof *sl + (size_t)nslots * (sizeof(uint32_t) + sizeof(uint64_t)));
    if (!sl) {
        give_pages(p, r, slot);
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
    slab_push(p, sl);
    *out = sl;
    return UVM_OK;
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
    int slot = slot_of(p, stream, device);
    if (UVM_UNLIKELY(slot < 0)) return UVM_EINVAL;
    int cls = uvm_size_class(size);
    uint64_t ord = p->next_ordinal;
    char *addr;
    if (cls >= 0) {
        uvm_slab *sl = p->streams[slot].partial[cls];
        if (UVM_UNLIKELY(!sl)) {
            int s = slab_new(p, slot, cls, device, &sl);
            if (s != UVM_OK) return s;
        }
        uint32_t w = sl->hint;
        while (sl->used[w] == ~0ull) w++;
        uint32_t bit = (uint32_t)__builtin_ctzll(~sl->used[w]);
        sl->used[w] |= 1ull << bit;
        sl->hint = w;
        uint32_t idx = w * 64 + bit;
        if (--sl->nfree == 0) slab_unlink(p, sl);
        sl->req[idx] = (uint32_t)size;
        sl->ordinal[idx] = ord;
        addr = sl->run->arena->base + sl->run->first * UVM_PAGE + (uint64_t)idx * sl->csize;
        b->capacity = sl->csize;
    } else {
        uint64_t n = (size + UVM_PAGE - 1) >> UVM_PAGE_SHIFT;
        uvm_run *r;
        int s = take_pages(p, n, slot, device, &r);
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
    uvm_arena *a = find_arena(p, (uintptr_t)ptr);
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
    uvm_arena *a = find_arena(p, x);
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
    uvm_arena *a = find_arena(p, (uintptr_t)ptr);
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
        int user = slot_of(p, stream, device);
        if (user > 0 && user != owner) {
            /* last used on another stream: a large block simply becomes that stream's
             * free memory; a slot of a slab (owned by its stream) waits for the user
             * stream first.  Rare: PyTorch frees on the allocation stream. */
            p->st.cross_stream_frees++;
            if (r->state == RUN_SLAB) {
                if (wait_stream(p, stream, device) != UVM_OK) {
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
        if (!sl->in_list) slab_push(p, sl);
        if (sl->nfree == sl->nslots) {
            /* keep one empty slab per (stream, class) to absorb alloc/free ping-pong */
            uvm_slab *head = p->streams[sl->stream].partial[sl->cls];
            if (head != sl || sl->next) slab_destroy(p, sl);
        }
    } else {
        give_pages(p, r, tag);
    }
    p->streams[owner].live--;
    p->st.n_free++;
    p->st.allocated_blocks--;
    p->st.allocated_bytes -= b->req;
    return UVM_OK;
}

uint64_t uvm_pool_release_cached(uvm_pool *p) {
    release_empty_slabs(p, -1);
    uint64_t before = p->st.bytes_released;
    for (size_t i = p->n_arenas; i-- > 0;) {
        if (p->arenas[i]->used_pages == 0) arena_destroy(p, i);
    }
    return p->st.bytes_released - before;
}

/* ---- invariants ---------------------------------------------------------------------------
 * What the structure above promises, checked from scratch (O(pages + bins + slabs)): the
 * runs of each arena tile it (every page in exactly one run, head/tail marking its ends);
 * every free run sits in exactly one bin (its stream tag's, the bin of its size) and each
 * slot's bins add up to its free_pages; bin lists link both ways and the bitmap marks the
 * non-empty bins; a slab fills one page of its stream, counts its free slots right and is
 * on its (stream, class) partial list exactly when it has one; the counters (blocks,
 * bytes, pages in use, reserved bytes, slabs, live blocks per stream) match what the runs
 * hold; arenas are sorted by base and 2 MiB aligned.  full: also check that no page
 * inside a run is marked as a run's end, and the slab bits past the last slot (O(pages)
 * rather than O(runs)). */
#define BROKEN(...)                                                                            \
    do {                                                                                       \
        if (why) snprintf(why, why_len, __VA_ARGS__);                                          \
        return false;                                                                          \
    } while (0)

static bool slab_is_valid(const uvm_pool *p, const uvm_run *r, bool full, uint64_t *blocks,
                          uint64_t *bytes, uint64_t *live, char *why, size_t why_len) {
    const uvm_slab *sl = r->slab;
    if (!sl || sl->run != r || r->npages != 1)
        BROKEN("slab run at page %llu: slab %p does not point back at it or spans %llu pages",
               (unsigned long long)r->first, (const void *)sl, (unsigned long long)r->npages);
    if (sl->cls >= UVM_NCLASSES || sl->csize != uvm_class_size((int)sl->cls) ||
        sl->nslots != UVM_PAGE / sl->csize || sl->stream != r->stream)
        BROKEN("slab at page %llu: class %u, slot size %u, %u slots, stream %d (run's %d)",
               (unsigned long long)r->first, sl->cls, sl->csize, sl->nslots, sl->stream,
               r->stream);
    uint32_t used = 0;
    for (uint32_t w = 0; w < (full ? 64 : (sl->nslots + 63) / 64); w++) {
        uint32_t lo = w * 64;
        uint64_t valid = lo >= sl->nslots ? 0 : sl->nslots - lo >= 64 ? ~0ull
                                                 : ~(~0ull << (sl->nslots - lo));
        if (~sl->used[w] & ~valid)
            BROKEN("slab at page %llu: a bit past its %u slots is clear (word %u)",
                   (unsigned long long)r->first, sl->nslots, w);
        for (uint64_t m = sl->used[w] & valid; m; m &= m - 1) {
            uint32_t i = lo + (uint32_t)__builtin_ctzll(m);
            used++;
            *bytes += sl->req[i];
            if (sl->req[i] > sl->csize)
                BROKEN("slab at page %llu: slot %u holds %u bytes in a %u-byte class",
                       (unsigned long long)r->first, i, sl->req[i], sl->csize);
        }
    }
    if (sl->nfree != sl->nslots - used)
        BROKEN("slab at page %llu: nfree %u, but %u of %u slots are used",
               (unsigned long long)r->first, sl->nfree, used, sl->nslots);
    if (sl->in_list != (sl->nfree > 0))
        BROKEN("slab at page %llu: %s its partial list with %u free slots",
               (unsigned long long)r->first, sl->in_list ? "on" : "off", sl->nfree);
    if (sl->in_list) {
        const uvm_slab *q = p->streams[sl->stream].partial[sl->cls];
        while (q && q != sl) q = q->next;
        if (!q) BROKEN("slab at page %llu: marked in_list, not on its partial list",
                       (unsigned long long)r->first);
    }
    *blocks += used;
    live[sl->stream] += used;
    return true;
}

static bool bins_are_valid(const uvm_pool *p, int t, uint64_t *free_runs, char *why,
                           size_t why_len) {
    const uvm_bins *B = p->streams[t].bins;
    uint64_t pages = 0;
    for (int b = 0; b < UVM_NBINS; b++) {
        bool bit = (B->bitmap[b >> 6] >> (b & 63)) & 1;
        if (bit != (B->bin[b] != NULL))
            BROKEN("stream slot %d bin %d: bitmap bit %d, list %s", t, b, bit,
                   B->bin[b] ? "non-empty" : "empty");
        const uvm_run *prev = NULL;
        for (const uvm_run *r = B->bin[b]; r; prev = r, r = r->next) {
            if (r->prev != prev)
                BROKEN("stream slot %d bin %d: a run's prev link is wrong", t, b);
            if (r->state != RUN_FREE || r->stream != t || bin_of(r->npages) != b)
                BROKEN("stream slot %d bin %d: run of %llu pages (state %d, stream %d) "
                       "does not belong there", t, b, (unsigned long long)r->npages,
                       r->state, r->stream);
            if (r->arena->head[r->first] != r)
                BROKEN("stream slot %d bin %d: run at page %llu is not in its arena", t, b,
                       (unsigned long long)r->first);
            pages += r->npages;
            (*free_runs)++;
        }
    }
    if (pages != p->streams[t].free_pages)
        BROKEN("stream slot %d: its bins hold %llu pages, free_pages says %llu", t,
               (unsigned long long)pages, (unsigned long long)p->streams[t].free_pages);
    return true;
}

bool uvm_pool_is_valid(const uvm_pool *p, bool full, char *why, size_t why_len) {
    uint64_t blocks = 0, bytes = 0, used_pages = 0, reserved = 0, slabs = 0, free_runs = 0;
    uint64_t live[UVM_MAX_STREAMS] = {0};
    if (p->st.arenas != p->n_arenas)
        BROKEN("stats say %llu arenas, the pool holds %zu", (unsigned long long)p->st.arenas,
               p->n_arenas);
    for (size_t i = 0; i < p->n_arenas; i++) {
        const uvm_arena *a = p->arenas[i];
        if ((uintptr_t)a->base & (UVM_PAGE - 1))
            BROKEN("arena %zu: base %p is not 2 MiB aligned", i, (void *)a->base);
        if (i > 0 && (uintptr_t)p->arenas[i - 1]->base >= (uintptr_t)a->base)
            BROKEN("arenas %zu and %zu are out of order", i - 1, i);
        uint64_t arena_used = 0;
        for (uint64_t pg = 0; pg < a->npages;) {
            const uvm_run *r = a->head[pg];
            if (!r) BROKEN("arena %zu: page %llu belongs to no run", i, (unsigned long long)pg);
            if (r->arena != a || r->first != pg || r->npages == 0 ||
                r->npages > a->npages - pg)
                BROKEN("arena %zu: run at page %llu says arena %p, first %llu, %llu pages", i,
                       (unsigned long long)pg, (void *)r->arena, (unsigned long long)r->first,
                       (unsigned long long)r->npages);
            for (uint64_t k = pg + 1; full && k < pg + r->npages; k++)
                if (a->head[k] || a->tail[k - 1])
                    BROKEN("arena %zu: page %llu inside the run at page %llu is marked as a "
                           "run's end", i, (unsigned long long)k, (unsigned long long)pg);
            if (a->tail[pg + r->npages - 1] != r)
                BROKEN("arena %zu: the run at page %llu is not marked at its last page", i,
                       (unsigned long long)pg);
            if (r->stream < 0 || r->stream >= UVM_MAX_STREAMS || !p->streams[r->stream].used)
                BROKEN("arena %zu: run at page %llu has stream slot %d, not in use", i,
                       (unsigned long long)pg, r->stream);
            if (r->state == RUN_LARGE) {
                if (r->req <= UVM_SMALL_MAX || (r->req + UVM_PAGE - 1) / UVM_PAGE != r->npages)
                    BROKEN("arena %zu: block at page %llu of %llu bytes spans %llu pages", i,
                           (unsigned long long)pg, (unsigned long long)r->req,
                           (unsigned long long)r->npages);
                blocks++;
                bytes += r->req;
                live[r->stream]++;
            } else if (r->state == RUN_SLAB) {
                if (!slab_is_valid(p, r, full, &blocks, &bytes, live, why, why_len)) return false;
                slabs++;
            } else if (r->state != RUN_FREE) {
                BROKEN("arena %zu: run at page %llu has state %d", i, (unsigned long long)pg,
                       r->state);
            }
            if (r->state != RUN_FREE) arena_used += r->npages;
            free_runs -= r->state == RUN_FREE; /* counted back up by the bins below */
            pg += r->npages;
        }
        if (arena_used != a->used_pages)
            BROKEN("arena %zu: %llu pages in use, used_pages says %llu", i,
                   (unsigned long long)arena_used, (unsigned long long)a->used_pages);
        used_pages += arena_used;
        reserved += a->npages * UVM_PAGE;
    }
    for (int t = 0; t < UVM_MAX_STREAMS; t++) {
        const uvm_stream_slot *S = &p->streams[t];
        if (!S->used) {
            if (S->bins || S->free_pages || S->live)
                BROKEN("stream slot %d is unused but holds memory", t);
            continue;
        }
        if (t > 0 && !p->streams[t - 1].used)
            BROKEN("stream slot %d is used after an unused one", t);
        if (!bins_are_valid(p, t, &free_runs, why, why_len)) return false;
        if (S->live != live[t])
            BROKEN("stream slot %d: %llu live blocks, its counter says %llu", t,
                   (unsigned long long)live[t], (unsigned long long)S->live);
        for (int c = 0; c < UVM_NCLASSES; c++)
            for (const uvm_slab *sl = S->partial[c]; sl; sl = sl->next)
                if (!sl->in_list || sl->stream != t || (int)sl->cls != c ||
                    (sl->next && sl->next->prev != sl) || sl->run->slab != sl)
                    BROKEN("stream slot %d class %d: a slab on the partial list is not one "
                           "of this list's", t, c);
    }
    if (free_runs != 0)
        BROKEN("%lld free runs are in no bin or in more than one", (long long)free_runs);
    if (blocks != p->st.allocated_blocks || bytes != p->st.allocated_bytes)
        BROKEN("the runs hold %llu blocks of %llu bytes, the stats say %llu blocks of %llu",
               (unsigned long long)blocks, (unsigned long long)bytes,
               (unsigned long long)p->st.allocated_blocks,
               (unsigned long long)p->st.allocated_bytes);
    if (used_pages * UVM_PAGE != p->st.in_use_bytes || reserved != p->st.reserved_bytes ||
        slabs != p->st.slabs)
        BROKEN("pages in use %llu, reserved %llu bytes, %llu slabs; the stats say %llu bytes "
               "in use, %llu reserved, %llu slabs", (unsigned long long)used_pages,
               (unsigned long long)reserved, (unsigned long long)slabs,
               (unsigned long long)p->st.in_use_bytes, (unsigned long long)p->st.reserved_bytes,
               (unsigned long long)p->st.slabs);
    return true;
}
#undef BROKEN

#ifdef UVM_SCHED_DEBUG
uint64_t uvm_pool_broken;

void uvm_pool_debug_check(const uvm_pool *p, const char *after) {
    /* the page scan every 64th change: with it every time, the 200,000-operation random
     * test under ASan took 150 s instead of seconds */
    static uint64_t n;
    char why[256];
    if (uvm_pool_is_valid(p, ++n % 64 == 0, why, sizeof why)) return;
    uvm_pool_broken++;
    uvm_log("pool invariant broken after %s: %s", after, why);
}
#endif
