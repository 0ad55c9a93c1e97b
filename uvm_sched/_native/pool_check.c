/* The pool's invariant check, uvm_pool_is_valid(): for tests and debug builds
 * (-DUVM_SCHED_DEBUG checks after every state change), never the hot path. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* ---- invariants ---------------------------------------------------------------------------
 * What the pool's structure (pool.c, pool_pages.c, pool_streams.c) promises, checked
 * from scratch (O(pages + bins + slabs)): the runs of each arena tile it (every page in
 * exactly one run, head/tail marking its ends); every free run sits in exactly one bin
 * (its stream tag's, the bin of its size) and each slot's bins add up to its free_pages;
 * bin lists link both ways and the bitmap marks the non-empty bins; a slab fills one
 * page of its stream, counts its free slots right and is on its (stream, class) partial
 * list exactly when it has one; the counters (blocks, bytes, pages in use, reserved
 * bytes, slabs, live blocks per stream) match what the runs hold; arenas are sorted by
 * base and 2 MiB aligned.  full: also check that no page inside a run is marked as a
 * run's end, and the slab bits past the last slot (O(pages) rather than O(runs)). */
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
            if (r->state != RUN_FREE || r->stream != t || uvm_bin_of(r->npages) != b)
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
