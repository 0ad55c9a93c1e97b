/* The pool's pages: size bins of free runs, run descriptors, arenas (the managed
 * reservations), and taking and giving back runs of whole pages, with the fallback ladder
 * (pool.c has the design; the caller holds the global lock). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* ---- bins of free runs --------------------------------------------------------------- */
int uvm_bin_of(uint64_t n) {
    if (n <= 64) return (int)n - 1;
    int e = 63 - __builtin_clzll(n);
    int b = 64 + (e - 6) * 4 + (int)((n >> (e - 2)) & 3);
    return b < UVM_NBINS ? b : UVM_NBINS - 1;
}

static void bin_insert(uvm_bins *B, uvm_run *r) {
    int b = uvm_bin_of(r->npages);
    r->prev = NULL;
    r->next = B->bin[b];
    if (r->next) r->next->prev = r;
    B->bin[b] = r;
    B->bitmap[b >> 6] |= 1ull << (b & 63);
}

void uvm_bin_remove(uvm_bins *B, uvm_run *r) {
    int b = uvm_bin_of(r->npages);
    if (r->prev)
        r->prev->next = r->next;
    else
        B->bin[b] = r->next;
    if (r->next) r->next->prev = r->prev;
    if (!B->bin[b]) B->bitmap[b >> 6] &= ~(1ull << (b & 63));
    r->prev = r->next = NULL;
}

static uvm_run *bin_find(uvm_bins *B, uint64_t n) {
    int b = uvm_bin_of(n);
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
void uvm_run_make_free(uvm_pool *p, uvm_run *r, int tag, bool only_untagged) {
    uvm_arena *a = r->arena;
    r->state = RUN_FREE;
    r->stream = tag;
    r->slab = NULL;
    uvm_run *L = r->first > 0 ? a->tail[r->first - 1] : NULL;
    uvm_run *R = r->first + r->npages < a->npages ? a->head[r->first + r->npages] : NULL;
    clear_bounds(r);
    if (L && L->state == RUN_FREE &&
        (only_untagged ? L->stream == 0 : tags_merge(L->stream, r->stream))) {
        uvm_bin_remove(bins_of(p, L->stream), L);
        p->streams[L->stream].free_pages -= L->npages;
        clear_bounds(L);
        if (r->stream == 0) r->stream = L->stream;
        r->first = L->first;
        r->npages += L->npages;
        run_recycle(p, L);
    }
    if (R && R->state == RUN_FREE &&
        (only_untagged ? R->stream == 0 : tags_merge(R->stream, r->stream))) {
        uvm_bin_remove(bins_of(p, R->stream), R);
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
uvm_arena *uvm_find_arena(uvm_pool *p, uintptr_t x) {
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
    uint64_t *discarded = calloc((npages + 63) / 64, sizeof *discarded);
    uvm_run *r = run_new(p);
    if (p->n_arenas == p->cap_arenas) {
        size_t cap = p->cap_arenas ? 2 * p->cap_arenas : 16;
        uvm_arena **arr = realloc(p->arenas, cap * sizeof *arr);
        if (arr) {
            p->arenas = arr;
            p->cap_arenas = cap;
        }
    }
    if (!a || !head || !tail || !discarded || !r || p->n_arenas == p->cap_arenas) {
        free(a), free(head), free(tail), free(discarded);
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
    a->discarded = discarded;
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
        uvm_bin_remove(bins_of(p, r->stream), r);
        p->streams[r->stream].free_pages -= r->npages;
        run_recycle(p, r);
    }
    uint64_t bytes = a->npages * UVM_PAGE;
    free(a->head);
    free(a->tail);
    free(a->discarded);
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

/* ---- pages ----------------------------------------------------------------------------- */
/* find: a free run of n pages for slot, from its own bins first, then untagged memory,
 * then a new arena.  false when none, *s saying why (the driver's status, or UVM_ENOMEM). */
static bool find_pages(uvm_pool *p, uint64_t n, int slot, int device, uvm_run **out, int *s) {
    uvm_run *r = bin_find(bins_of(p, slot), n);
    if (!r && slot != 0) r = bin_find(bins_of(p, 0), n);
    if (!r) {
        *s = arena_new(p, n, device);
        if (*s == UVM_OK) r = bin_find(bins_of(p, 0), n);
    }
    *out = r;
    return r != NULL;
}

/* The rungs below find; each returns true: the find after it runs whatever it freed,
 * since that find also asks the driver again for an arena, which may succeed now. */
static bool reclaim_other_streams(uvm_pool *p, int slot) {
    uvm_reclaim(p, slot); /* their free memory becomes anyone's (waits for the device) */
    return true;
}

static bool release_empty_arenas(uvm_pool *p) {
    uvm_pool_release_cached(p); /* the limit may then have room for an arena that fits */
    return true;
}

static bool page_discarded(const uvm_arena *a, uint64_t pg) {
    return (a->discarded[pg / 64] >> (pg % 64)) & 1;
}

void uvm_pages_discarded(uvm_pool *p, const void *addr, uint64_t bytes) {
    uvm_arena *a = uvm_find_arena(p, (uintptr_t)addr);
    if (!a || !bytes) return;
    uint64_t first = (uint64_t)((const char *)addr - a->base) / UVM_PAGE;
    uint64_t end = ((uint64_t)((const char *)addr - a->base) + bytes + UVM_PAGE - 1) / UVM_PAGE;
    if (end > a->npages) end = a->npages;
    for (uint64_t pg = first; pg < end; pg++) a->discarded[pg / 64] |= 1ull << (pg % 64);
}

/* Populate the discarded pages of run r, about to be handed out for stream slot `slot`, on
 * that stream, ahead of whatever the caller queues there next.  Why: a kernel touching
 * discarded pages faults them in at about 0.5 GB/s on an H200 (CUDA 13.0 driver 580),
 * against about 490 GB/s for a prefetch of them (benchmarks/results/gpu_h200.md).  A plan
 * populates its own allocations (exec.c: Populates), but after a divergence, a disarm or a
 * watchdog's verdict the iterations run unplanned over pages the plan discarded, and a
 * plan leaves some allocations unpopulated on purpose; this makes "no kernel touches a
 * discarded page" the pool's invariant instead of each plan's.  A failed prefetch only
 * costs speed (the kernel's faults populate the pages), so it is not an allocation error. */
static void populate_discarded(uvm_pool *p, uvm_run *r, int slot, int device) {
    uvm_arena *a = r->arena;
    for (uint64_t pg = r->first, end = r->first + r->npages; pg < end;) {
        if (!page_discarded(a, pg)) {
            pg++;
            continue;
        }
        uint64_t q = pg;
        for (; q < end && page_discarded(a, q); q++) a->discarded[q / 64] &= ~(1ull << (q % 64));
        (void)p->prim->prefetch(device, a->base + pg * UVM_PAGE, (q - pg) * UVM_PAGE, false,
                                uvm_pool_stream_handle(p, slot));
        pg = q;
    }
}

/* The fallback ladder, as in PyTorch's caching allocator's malloc
 * (alloc_block || (release_available_cached_blocks && alloc_block) || ...). */
int uvm_take_pages(uvm_pool *p, uint64_t n, int slot, int device, uvm_run **out) {
    int s = UVM_OK;
    uvm_run *r = NULL;
    bool found = find_pages(p, n, slot, device, &r, &s) ||
                 (reclaim_other_streams(p, slot) && find_pages(p, n, slot, device, &r, &s)) ||
                 (release_empty_arenas(p) && find_pages(p, n, slot, device, &r, &s));
    if (!found) return s != UVM_OK ? s : UVM_ENOMEM;
    int tag = r->stream;
    uvm_bin_remove(bins_of(p, tag), r);
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
    populate_discarded(p, r, slot, device);
    *out = r;
    return UVM_OK;
}

void uvm_give_pages(uvm_pool *p, uvm_run *r, int tag) {
    r->arena->used_pages -= r->npages;
    p->st.in_use_bytes -= r->npages * UVM_PAGE;
    uvm_run_make_free(p, r, tag, false);
}

uint64_t uvm_pool_release_cached(uvm_pool *p) {
    uvm_release_empty_slabs(p, -1);
    uint64_t before = p->st.bytes_released;
    for (size_t i = p->n_arenas; i-- > 0;) {
        if (p->arenas[i]->used_pages == 0) arena_destroy(p, i);
    }
    return p->st.bytes_released - before;
}
