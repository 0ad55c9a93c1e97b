/* Native tests of the pool, ring and executor, built with the library sources under
 * AddressSanitizer/UBSan (see Makefile; scripts/native_tests.sh runs them).
 * Usage: test_native [seconds-for-the-thread-test]  (UVM_SCHED_LIBCUDA = fake driver
 * path enables the fake-driver cases, UVM_SCHED_LIBCUPTI = fake CUPTI the fault-sampling
 * ones). Exit status 0 = all passed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static int failures;
#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

static uint64_t stat_of(const char *name) {
    uint64_t v[128];
    size_t n = uvm_sched_stats(v, 128);
    const char *names = uvm_sched_stats_names();
    size_t len = strlen(name);
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(names, name, len) && names[len] == ',') return v[i];
        names = strchr(names, ',') + 1;
    }
    fprintf(stderr, "no stat %s\n", name);
    exit(2);
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* a DNN-like size: mostly small, some MiB-sized activations */
static size_t dnn_size(uint64_t r) {
    switch (r % 10) {
    case 0: case 1: case 2: case 3: return 1 + (r >> 8) % 4096;
    case 4: case 5: case 6: return 4096 + (r >> 8) % (1 << 20);
    case 7: case 8: return (1 << 20) + (r >> 8) % (16 << 20);
    default: return (r >> 8) % 512 + 1;
    }
}

static void test_size_classes(void) {
    int prev = 0;
    for (uint64_t s = 1; s <= UVM_SMALL_MAX; s += (s < 70000 ? 1 : 97)) {
        int c = uvm_size_class(s);
        CHECK(c >= 0 && c < UVM_NCLASSES, "size %llu class %d", (unsigned long long)s, c);
        CHECK(uvm_class_size(c) >= s, "size %llu > class size", (unsigned long long)s);
        CHECK(c == 0 || uvm_class_size(c - 1) < s, "size %llu not in the smallest class",
              (unsigned long long)s);
        CHECK(c >= prev, "class not monotone at %llu", (unsigned long long)s);
        CHECK(uvm_class_size(c) % UVM_MIN_ALIGN == 0, "class size %llu not 512-aligned",
              (unsigned long long)uvm_class_size(c));
        prev = c;
    }
    CHECK(uvm_size_class(UVM_SMALL_MAX) == UVM_NCLASSES - 1, "last class");
    CHECK(uvm_size_class(UVM_SMALL_MAX + 1) == -1, "large");
}

static void test_bad_input(void) {
    void *p = NULL;
    CHECK(uvm_sched_malloc_status(0, 0, NULL, &p) == UVM_OK && p == NULL, "zero size");
    CHECK(uvm_sched_free_status(NULL, 0, 0, NULL, 0) == UVM_OK, "free(NULL)");
    CHECK(uvm_sched_malloc(SIZE_MAX, 0, NULL) == NULL, "SIZE_MAX");
    CHECK(uvm_sched_malloc(SIZE_MAX - 4096, 0, NULL) == NULL, "near SIZE_MAX");
    void *a = uvm_sched_malloc(1000, 0, NULL);
    void *b = uvm_sched_malloc(3 << 20, 0, NULL);
    CHECK(a && b, "malloc");
    CHECK(((uintptr_t)a & 511) == 0, "small alignment %p", a);
    CHECK(((uintptr_t)b & (UVM_PAGE - 1)) == 0, "large 2 MiB alignment %p", b);
    int local;
    void *heap = malloc(64);
    CHECK(uvm_sched_free_status(&local, 4, 0, NULL, 0) == UVM_EUNKNOWN, "stack pointer");
    CHECK(uvm_sched_free_status(heap, 64, 0, NULL, 0) == UVM_EUNKNOWN, "heap pointer");
    free(heap);
    CHECK(uvm_sched_free_status((char *)a + 8, 1000, 0, NULL, 0) == UVM_EUNKNOWN, "interior small");
    CHECK(uvm_sched_free_status((char *)b + UVM_PAGE, 3 << 20, 0, NULL, 0) == UVM_EUNKNOWN,
          "interior large");
    CHECK(uvm_sched_free_status(a, 999, 0, NULL, 0) == UVM_ESIZE, "wrong size");
    uint64_t size_a, ord_a, stream_a, ord_b, ords[4];
    CHECK(uvm_sched_block_info(a, &size_a, &ord_a, &stream_a) == UVM_OK, "info a");
    CHECK(uvm_sched_block_info(b, &size_a, &ord_b, &stream_a) == UVM_OK, "info b");
    uint64_t asked[4] = {(uintptr_t)b, (uintptr_t)a, (uintptr_t)a + 8, (uintptr_t)&local};
    CHECK(uvm_sched_block_ordinals(asked, 4, ords) == UVM_OK, "block ordinals");
    CHECK(ords[0] == ord_b && ords[1] == ord_a && ords[2] == UINT64_MAX && ords[3] == UINT64_MAX,
          "ordinals %llu %llu %llu %llu", (unsigned long long)ords[0],
          (unsigned long long)ords[1], (unsigned long long)ords[2], (unsigned long long)ords[3]);
    CHECK(uvm_sched_block_ordinals(NULL, 1, ords) == UVM_EINVAL, "NULL ptrs");
    CHECK(uvm_sched_block_ordinals(asked, 1, NULL) == UVM_EINVAL, "NULL ordinals");
    CHECK(uvm_sched_block_ordinals(NULL, 0, NULL) == UVM_OK, "nothing asked");
    CHECK(stat_of("allocated_blocks") == 2, "a refused free leaves the block allocated");
    CHECK(uvm_sched_free_status(a, 1000, 0, NULL, 0) == UVM_OK, "free a");
    CHECK(uvm_sched_free_status(a, 1000, 0, NULL, 0) == UVM_EDOUBLEFREE, "double free small");
    CHECK(uvm_sched_free_status(b, 3 << 20, 0, NULL, 0) == UVM_OK, "free b");
    CHECK(uvm_sched_free_status(b, 3 << 20, 0, NULL, 0) == UVM_EDOUBLEFREE, "double free large");
    uvm_sched_free(b, 3 << 20, 0, NULL); /* the PyTorch ABI: logged and counted, no abort */
    CHECK(stat_of("errors_double_free") == 3, "double frees counted: %llu",
          (unsigned long long)stat_of("errors_double_free"));
    CHECK(stat_of("allocated_blocks") == 0 && stat_of("allocated_bytes") == 0, "accounting");
}

static void test_limit(void) {
    setenv("UVM_SCHED_LIMIT_BYTES", "16M", 1);
    setenv("UVM_SCHED_ARENA_BYTES", "8M", 1);
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    void *a = uvm_sched_malloc(6 << 20, 0, NULL);
    void *b = uvm_sched_malloc(6 << 20, 0, NULL);
    CHECK(a && b, "two arenas");
    CHECK(uvm_sched_malloc(6 << 20, 0, NULL) == NULL, "limit reached");
    CHECK(stat_of("n_oom") == 1 && stat_of("last_oom_size") == (6 << 20), "oom counted");
    uvm_sched_free(a, 6 << 20, 0, NULL);
    void *c = uvm_sched_malloc(6 << 20, 0, NULL);
    CHECK(c == a, "reuse after free %p %p", c, a);
    /* a different stream gets the first stream's memory only through reclaim */
    uvm_sched_free(c, 6 << 20, 0, NULL);
    void *d = uvm_sched_malloc(6 << 20, 0, (void *)0x1234);
    CHECK(d == a && stat_of("reclaims") >= 1, "reclaim across streams %p", d);
    uvm_sched_free(d, 6 << 20, 0, (void *)0x1234);
    uvm_sched_free(b, 6 << 20, 0, NULL);
    CHECK(uvm_sched_release_cached() == (16 << 20), "release empty arenas");
    CHECK(stat_of("reserved_bytes") == 0, "nothing reserved");
    unsetenv("UVM_SCHED_LIMIT_BYTES");
    unsetenv("UVM_SCHED_ARENA_BYTES");
}

typedef struct {
    char *p;
    size_t n;
} blk;

static int cmp_blk(const void *x, const void *y) {
    const blk *a = x, *b = y;
    return a->p < b->p ? -1 : a->p > b->p;
}

static void test_random_model(int ops) {
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    enum { N = 512 };
    blk live[N];
    memset(live, 0, sizeof live);
    uint64_t bytes = 0, blocks = 0;
    for (int i = 0; i < ops; i++) {
        int k = (int)(rnd() % N);
        if (live[k].p) {
            CHECK(live[k].p[0] == (char)k && live[k].p[live[k].n - 1] == (char)k,
                  "block %d overwritten", k);
            uvm_sched_free(live[k].p, live[k].n, 0, NULL);
            bytes -= live[k].n;
            blocks--;
            live[k].p = NULL;
        } else {
            size_t n = dnn_size(rnd());
            char *p = uvm_sched_malloc(n, 0, (void *)(uintptr_t)(rnd() % 3 * 16));
            CHECK(p != NULL, "malloc %zu", n);
            if (!p) continue;
            CHECK(((uintptr_t)p & 511) == 0, "alignment");
            if (n > UVM_SMALL_MAX) CHECK(((uintptr_t)p & (UVM_PAGE - 1)) == 0, "2 MiB alignment");
            p[0] = (char)k;
            p[n - 1] = (char)k;
            live[k].p = p;
            live[k].n = n;
            bytes += n;
            blocks++;
        }
        if (i % 5000 == 0) {
            blk s[N];
            int m = 0;
            for (int j = 0; j < N; j++)
                if (live[j].p) s[m++] = live[j];
            qsort(s, (size_t)m, sizeof *s, cmp_blk);
            for (int j = 1; j < m; j++)
                CHECK(s[j - 1].p + s[j - 1].n <= s[j].p, "overlap %p+%zu > %p", s[j - 1].p,
                      s[j - 1].n, s[j].p);
            CHECK(stat_of("allocated_bytes") == bytes && stat_of("allocated_blocks") == blocks,
                  "accounting");
        }
    }
    for (int k = 0; k < N; k++)
        if (live[k].p) uvm_sched_free(live[k].p, live[k].n, 0, NULL);
    CHECK(stat_of("allocated_blocks") == 0, "all freed");
    CHECK(stat_of("errors_unknown_pointer") == 0 && stat_of("errors_double_free") == 0, "no errors");
}

static _Atomic int stop_threads;  /* read by the workers while the main thread sets it */
static _Atomic long thread_errors, thread_ops;

static void *worker(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg, st = 0x9E3779B97F4A7C15ull * (id + 1);
    enum { N = 64 };
    blk live[N];
    memset(live, 0, sizeof live);
    long ops = 0;
    while (!stop_threads) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        int k = (int)(st % N);
        if (live[k].p) {
            uint64_t *w = (uint64_t *)live[k].p;
            if (w[0] != (id << 32 | (uint64_t)k)) thread_errors++;
            uvm_sched_free(live[k].p, live[k].n, 0, (void *)(uintptr_t)(id % 2 * 16));
            live[k].p = NULL;
        } else {
            size_t n = dnn_size(st) | 8;
            char *p = uvm_sched_malloc(n, 0, (void *)(uintptr_t)(id % 2 * 16));
            if (!p) {
                thread_errors++;
                continue;
            }
            *(uint64_t *)p = id << 32 | (uint64_t)k;
            live[k].p = p;
            live[k].n = n;
        }
        ops++;
    }
    for (int k = 0; k < N; k++)
        if (live[k].p) {
            if (*(uint64_t *)live[k].p != (id << 32 | (uint64_t)k)) thread_errors++;
            uvm_sched_free(live[k].p, live[k].n, 0, (void *)(uintptr_t)(id % 2 * 16));
        }
    thread_ops += ops;
    return NULL;
}

static void test_threads(double seconds) {
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    pthread_t t[8];
    stop_threads = 0;
    for (uintptr_t i = 0; i < 8; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    stop_threads = 1;
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    CHECK(thread_errors == 0, "%ld lost or overlapping blocks", (long)thread_errors);
    CHECK(stat_of("allocated_blocks") == 0, "blocks left: %llu",
          (unsigned long long)stat_of("allocated_blocks"));
    CHECK(stat_of("n_malloc") == stat_of("n_free"), "malloc/free counts");
    printf("threads: 8 threads, %.1f s, %ld operations\n", seconds, (long)thread_ops);
}

static bool pool_valid(char *why, size_t n) {
    pthread_mutex_lock(&uvm_g.lock);
    bool ok = uvm_pool_is_valid(&uvm_g.pool, true, why, n);
    pthread_mutex_unlock(&uvm_g.lock);
    return ok;
}

/* The invariant check can fail: each corruption below is reported, then undone. */
static void test_invariant_check_reports_corruption(void) {
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    char why[256] = "";
    void *small = uvm_sched_malloc(1000, 0, NULL);
    void *large = uvm_sched_malloc(3 << 20, 0, NULL);
    void *other = uvm_sched_malloc(5 << 20, 0, (void *)16);
    uvm_sched_free(other, 5 << 20, 0, (void *)16); /* free pages in a stream's bins */
    CHECK(small && large, "malloc");
    CHECK(pool_valid(why, sizeof why), "a healthy pool: %s", why);
    uvm_pool *p = &uvm_g.pool;

    p->streams[1].free_pages += 1;
    CHECK(!pool_valid(why, sizeof why) && strstr(why, "free_pages"), "bins vs free_pages: %s",
          why);
    p->streams[1].free_pages -= 1;

    p->st.allocated_bytes += 1;
    CHECK(!pool_valid(why, sizeof why) && strstr(why, "blocks of"), "allocated bytes: %s", why);
    p->st.allocated_bytes -= 1;

    uvm_block b;
    CHECK(uvm_pool_lookup(p, large, &b) == UVM_OK, "lookup");
    uvm_arena *a = p->arenas[0];
    uint64_t pg = (uint64_t)((char *)large - a->base) >> UVM_PAGE_SHIFT;
    uvm_run *r = a->head[pg];
    a->head[pg + 1] = r; /* a page inside the block marked as a run's start */
    CHECK(!pool_valid(why, sizeof why) && strstr(why, "inside the run"), "interior page: %s",
          why);
    a->head[pg + 1] = NULL;

    uvm_run *fr = NULL;
    for (int t = 0; t < UVM_MAX_STREAMS && p->streams[t].used; t++)
        for (int i = 0; i < UVM_NBINS && !fr; i++) fr = p->streams[t].bins->bin[i];
    CHECK(fr != NULL, "a free run");
    if (fr) {
        fr->state = RUN_LARGE; /* a run both free (in a bin) and allocated */
        CHECK(!pool_valid(why, sizeof why), "free run marked allocated: %s", why);
        fr->state = RUN_FREE;
    }

    uint64_t pg_small = (uint64_t)((char *)small - a->base) >> UVM_PAGE_SHIFT;
    uvm_slab *sl = a->head[pg_small]->slab;
    sl->nfree -= 1;
    CHECK(!pool_valid(why, sizeof why) && strstr(why, "nfree"), "slab count: %s", why);
    sl->nfree += 1;

    CHECK(pool_valid(why, sizeof why), "restored: %s", why);
    uvm_sched_free(small, 1000, 0, NULL);
    uvm_sched_free(large, 3 << 20, 0, NULL);
}

static void test_ring_overflow(void) {
    setenv("UVM_SCHED_RING_EVENTS", "1024", 1);
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    for (int i = 0; i < 3000; i++) uvm_sched_free(uvm_sched_malloc(64, 0, NULL), 64, 0, NULL);
    CHECK(stat_of("events_dropped") == 6000 - 1024, "dropped %llu",
          (unsigned long long)stat_of("events_dropped"));
    uvm_event *ev = calloc(4096, sizeof *ev);
    size_t n = uvm_sched_drain(ev, 4096);
    CHECK(n == 1024 && ev[0].tick == 0 && ev[1023].tick == 1023, "drain %zu", n);
    CHECK(uvm_sched_drain(ev, 4096) == 0, "drained");
    uvm_sched_step();
    n = uvm_sched_drain(ev, 4096);
    CHECK(n == 1 && ev[0].kind == UVM_EV_MARK && ev[0].tick == 6000, "mark after overflow");
    free(ev);
    unsetenv("UVM_SCHED_RING_EVENTS");
}

static void test_executor(const char *backend) {
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
    /* iteration: alloc A (4 MiB), alloc B (1 KiB), free B, free A */
    uvm_plan_row rows[4] = {
        {.tick = 0, .action = UVM_ACT_PREFETCH_TO_HOST, .block = 0},
        {.tick = 2, .action = UVM_ACT_PREFETCH_TO_DEVICE, .block = 0, .bytes = 1 << 20},
        {.tick = 3, .action = UVM_ACT_DISCARD, .block = 0}, /* A is freed at 3: discarded */
        {.tick = 3, .action = UVM_ACT_DISCARD, .block = 1}, /* B: freed before, and small */
    };
    uint64_t sizes[2] = {4 << 20, 1024};
    CHECK(uvm_sched_exec_arm(rows, 4, sizes, 2, 4, UVM_SYNC_PERIOD, 0, 1) == UVM_OK, "arm");
    for (int it = 0; it < 3; it++) {
        void *a = uvm_sched_malloc(it == 1 ? 5 << 20 : 4 << 20, 0, NULL);
        void *b = uvm_sched_malloc(1024, 0, NULL);
        uvm_sched_free(b, 1024, 0, NULL);
        uvm_sched_free(a, it == 1 ? 5 << 20 : 4 << 20, 0, NULL);
    }
    CHECK(stat_of("divergences") == 1, "one divergence (iteration 1)");
    CHECK(stat_of("actions_issued") == 6, "issued %llu", (unsigned long long)stat_of("actions_issued"));
    CHECK(stat_of("bytes_discarded") == 8 << 20, "discarded bytes");
    CHECK(stat_of("actions_skipped") == 2, "skipped %llu", (unsigned long long)stat_of("actions_skipped"));
    CHECK(stat_of("bytes_prefetched_h2d") == 2 << 20, "h2d bytes");
    CHECK(stat_of("bytes_prefetched_d2h") == 8 << 20, "d2h bytes");
    uvm_sched_exec_disarm();
    /* bad tables are refused */
    uvm_plan_row bad = {.tick = 9, .action = 0};
    CHECK(uvm_sched_exec_arm(&bad, 1, sizes, 2, 4, 0, 0, 1) == UVM_EINVAL, "tick out of range");
    bad.tick = 0;
    bad.action = 17;
    CHECK(uvm_sched_exec_arm(&bad, 1, sizes, 2, 4, 0, 0, 1) == UVM_EINVAL, "bad action");
    bad.action = 0;
    bad.block = 5;
    CHECK(uvm_sched_exec_arm(&bad, 1, sizes, 2, 4, 0, 0, 1) == UVM_EINVAL, "bad block");
    CHECK(uvm_sched_exec_arm(rows, 4, sizes, 2, 4, UVM_SYNC_PERIOD, 0, 1) == UVM_OK, "rearm");

    /* armed mid-iteration at phase 2: A and B made before; B's free is event 2 */
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
    void *a = uvm_sched_malloc(4 << 20, 0, NULL);
    void *b = uvm_sched_malloc(1024, 0, NULL);
    uint64_t before[2] = {(uint64_t)(uintptr_t)a, (uint64_t)(uintptr_t)b};
    CHECK(uvm_sched_exec_arm_at(rows, 4, sizes, 2, 4, UVM_SYNC_PERIOD, 0, 1, 4, before, 2) ==
              UVM_EINVAL, "phase = period refused");
    CHECK(uvm_sched_exec_arm_at(rows, 4, sizes, 2, 4, UVM_SYNC_PERIOD, 0, 1, 1, before, 2) ==
              UVM_EINVAL, "more allocations than phase events refused");
    CHECK(uvm_sched_exec_arm_at(rows, 4, sizes, 2, 4, UVM_SYNC_MARKER, 0, 0, 2, before, 2) ==
              UVM_EINVAL, "phase while waiting for a marker refused");
    CHECK(stat_of("plan_armed") == 0, "nothing armed by a refusal");
    CHECK(uvm_sched_exec_arm_at(rows, 4, sizes, 2, 4, UVM_SYNC_PERIOD, 0, 1, 2, before, 2) ==
              UVM_OK, "arm at phase 2");
    uvm_sched_free(b, 1024, 0, NULL); /* event 2: A prefetched (1 MiB) */
    uvm_sched_free(a, 4 << 20, 0, NULL); /* event 3: A discarded at its free; B skipped */
    CHECK(stat_of("iterations") == 2, "the next iteration starts after event 3");
    CHECK(stat_of("actions_issued") == 2 && stat_of("actions_skipped") == 1,
          "issued %llu skipped %llu", (unsigned long long)stat_of("actions_issued"),
          (unsigned long long)stat_of("actions_skipped"));
    CHECK(stat_of("bytes_prefetched_h2d") == 1 << 20, "h2d bytes after phase arm");
    uvm_event ev[32];
    size_t n = uvm_sched_drain(ev, 32);
    int iters = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].kind == UVM_EV_ITER)
            CHECK(ev[i].addr == (iters++ ? 4u : 0u), "iteration %d starts at event %llu", iters,
                  (unsigned long long)ev[i].addr);
    CHECK(iters == 2, "two iterations begun (%d)", iters);
    uvm_sched_exec_disarm();
}

/* one iteration of test_period_resync's loop: alloc A (4 MiB), alloc B (1 KiB), alloc C
 * (2 MiB), free C, free B, free A; without_c: a step with C's two events missing */
static void resync_step(int without_c) {
    void *a = uvm_sched_malloc(4 << 20, 0, NULL);
    void *b = uvm_sched_malloc(1024, 0, NULL);
    if (!without_c) uvm_sched_free(uvm_sched_malloc(2 << 20, 0, NULL), 2 << 20, 0, NULL);
    uvm_sched_free(b, 1024, 0, NULL);
    uvm_sched_free(a, 4 << 20, 0, NULL);
}

/* sync=UVM_SYNC_PERIOD_RESYNC: events inserted into an iteration are gone through without
 * actions and the iteration goes on; a step with events missing costs one iteration, not
 * every later one (as with sync=period); a loop that changed counts on after two periods */
static void test_period_resync(const char *backend) {
    uvm_plan_row row = {.tick = 1, .action = UVM_ACT_PREFETCH_TO_DEVICE, .block = 0};
    uint64_t sizes[3] = {4 << 20, 1024, 2 << 20};
    for (int sync = UVM_SYNC_PERIOD; sync <= UVM_SYNC_PERIOD_RESYNC; sync++) {
        CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
        CHECK(uvm_sched_exec_arm(&row, 1, sizes, 3, 6, sync, 0, 1) == UVM_OK, "arm %d", sync);
        resync_step(0);
        resync_step(0); /* clean: the start's level is known */
        resync_step(1); /* C missing: the count is two events off */
        for (int i = 0; i < 3; i++) resync_step(0);
        uint64_t div = stat_of("divergences"), issued = stat_of("actions_issued");
        if (sync == UVM_SYNC_PERIOD) {
            CHECK(div >= 3, "sync=period counts on shifted: every later step diverges (%llu)",
                  (unsigned long long)div);
            continue;
        }
        /* diverged at the next A (allocation 2), back at the start after that step */
        CHECK(div == 1 && stat_of("resyncs") == 1 && stat_of("insertions") == 0,
              "one divergence, one resync: %llu, %llu, %llu", (unsigned long long)div,
              (unsigned long long)stat_of("resyncs"), (unsigned long long)stat_of("insertions"));
        CHECK(issued == 5, "every step but the one after the short one issued: %llu",
              (unsigned long long)issued);
        /* an insertion (an eval batch) inside an iteration: A, [X, free X], B, C, ... */
        uint64_t iters = stat_of("iterations");
        void *a = uvm_sched_malloc(4 << 20, 0, NULL);
        uvm_sched_free(uvm_sched_malloc(3 << 20, 0, NULL), 3 << 20, 0, NULL);
        void *b = uvm_sched_malloc(1024, 0, NULL);
        uvm_sched_free(uvm_sched_malloc(2 << 20, 0, NULL), 2 << 20, 0, NULL);
        uvm_sched_free(b, 1024, 0, NULL);
        uvm_sched_free(a, 4 << 20, 0, NULL);
        CHECK(stat_of("divergences") == 2 && stat_of("insertions") == 1,
              "diverged at X, resumed after it: %llu, %llu",
              (unsigned long long)stat_of("divergences"),
              (unsigned long long)stat_of("insertions"));
        CHECK(stat_of("actions_issued") == 6 && stat_of("iterations") == iters + 1,
              "the iteration went on and issued its action: %llu issued, %llu iterations",
              (unsigned long long)stat_of("actions_issued"),
              (unsigned long long)(stat_of("iterations") - iters));
        resync_step(0);
        CHECK(stat_of("actions_issued") == 7, "in phase after it");
        uvm_event ev[128];
        size_t n = uvm_sched_drain(ev, 128), resumes = 0;
        for (size_t i = 0; i < n; i++)
            if (ev[i].kind == UVM_EV_RESUME) {
                resumes++;
                CHECK(ev[i].size == 2 && ev[i].arg == 1, "2 events inserted at event 1: %llu "
                      "at %lld", (unsigned long long)ev[i].size, (long long)ev[i].arg);
            }
        CHECK(resumes == 1, "one RESUME record (%zu)", resumes);
        /* a loop that changed (a block that stays): never the level again; iterations go on */
        iters = stat_of("iterations");
        a = uvm_sched_malloc(4 << 20, 0, NULL);
        void *d = uvm_sched_malloc(8 << 20, 0, NULL);
        for (int i = 0; i < 3; i++) resync_step(0);
        CHECK(stat_of("iterations") >= iters + 2, "counting on after two periods: %llu",
              (unsigned long long)(stat_of("iterations") - iters));
        uvm_sched_free(d, 8 << 20, 0, NULL);
        uvm_sched_free(a, 4 << 20, 0, NULL);
        uvm_sched_exec_disarm();
    }
    uvm_plan_row bad = {.tick = 0, .action = 0};
    CHECK(uvm_sched_exec_arm(&bad, 1, sizes, 3, 6, 3, 0, 1) == UVM_EINVAL, "sync 3 refused");
}

/* an inserted stretch of 4 events at event 1 of resync_step's iteration: X (3 MiB), Y (y
 * bytes), free Y, free X */
static void inserted_step(uint64_t y) {
    void *a = uvm_sched_malloc(4 << 20, 0, NULL);
    void *x = uvm_sched_malloc(3 << 20, 0, NULL);
    uvm_sched_free(uvm_sched_malloc(y, 0, NULL), y, 0, NULL);
    uvm_sched_free(x, 3 << 20, 0, NULL);
    void *b = uvm_sched_malloc(1024, 0, NULL);
    uvm_sched_free(uvm_sched_malloc(2 << 20, 0, NULL), 2 << 20, 0, NULL);
    uvm_sched_free(b, 1024, 0, NULL);
    uvm_sched_free(a, 4 << 20, 0, NULL);
}

/* sync=UVM_SYNC_PERIOD_RESYNC with a planned insertion: the stretch runs its own table and
 * the iteration goes on after it; a stretch that differs fires nothing from where it does */
static void test_planned_insertion(const char *backend) {
    uvm_plan_row row = {.tick = 1, .action = UVM_ACT_PREFETCH_TO_DEVICE, .block = 0};
    uint64_t sizes[3] = {4 << 20, 1024, 2 << 20};
    uvm_plan_row ins[2] = {{.tick = 0, .action = UVM_ACT_PREFETCH_TO_DEVICE, .block = 0},
                           {.tick = 1, .action = UVM_ACT_PREFETCH_TO_DEVICE, .block = 1}};
    uint64_t ins_sizes[2] = {3 << 20, 1 << 20};
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
    CHECK(uvm_sched_exec_set_insertion(ins, 2, ins_sizes, 2, 4, 1) == UVM_OK, "set");
    CHECK(uvm_sched_exec_set_insertion(ins, 2, ins_sizes, 2, 1, 1) == UVM_EINVAL,
          "a row past the stretch's events refused");
    CHECK(uvm_sched_exec_set_insertion(ins, 2, ins_sizes, 1, 4, 1) == UVM_EINVAL,
          "a row naming an allocation past the stretch's refused");
    CHECK(uvm_sched_exec_set_insertion(NULL, 0, NULL, 0, 4, 1) == UVM_EINVAL,
          "a stretch without an allocation refused");
    CHECK(uvm_sched_exec_arm(&row, 1, sizes, 3, 6, UVM_SYNC_PERIOD_RESYNC, 0, 1) == UVM_OK,
          "arm");
    resync_step(0);
    resync_step(0);
    CHECK(stat_of("actions_issued") == 2, "two steps");
    inserted_step(1 << 20);
    CHECK(stat_of("insertions") == 1 && stat_of("insertions_planned") == 1 &&
              stat_of("insertion_mismatches") == 0,
          "the stretch ran planned: %llu, %llu, %llu", (unsigned long long)stat_of("insertions"),
          (unsigned long long)stat_of("insertions_planned"),
          (unsigned long long)stat_of("insertion_mismatches"));
    uvm_event rec[64];
    size_t nrec = uvm_sched_drain(rec, 64), planned = 0;
    for (size_t i = 0; i < nrec; i++)
        if (rec[i].kind == UVM_EV_RESUME)
            planned += rec[i].addr == 1 && rec[i].size == 4 && rec[i].arg == 1;
    CHECK(planned == 1, "one RESUME record saying planned, 4 events at event 1 (%zu)", planned);
    CHECK(stat_of("actions_issued") == 5 && stat_of("bytes_prefetched_h2d") == 16u << 20,
          "X and Y prefetched, then the iteration's A: %llu issued, %llu bytes",
          (unsigned long long)stat_of("actions_issued"),
          (unsigned long long)stat_of("bytes_prefetched_h2d"));
    inserted_step(512 << 10); /* Y of another size: a wrong guess from there */
    CHECK(stat_of("insertions") == 2 && stat_of("insertions_planned") == 1 &&
              stat_of("insertion_mismatches") == 1,
          "the wrong guess counted: %llu planned, %llu mismatched",
          (unsigned long long)stat_of("insertions_planned"),
          (unsigned long long)stat_of("insertion_mismatches"));
    CHECK(stat_of("actions_issued") == 7, "X's action, then none of the stretch's, then A's: "
          "%llu", (unsigned long long)stat_of("actions_issued"));
    resync_step(0);
    CHECK(stat_of("actions_issued") == 8 && stat_of("divergences") == 2,
          "in phase after both: %llu issued, %llu divergences",
          (unsigned long long)stat_of("actions_issued"),
          (unsigned long long)stat_of("divergences"));
    uvm_sched_exec_disarm(); /* the stretch's table outlives re-arming; cleared by events 0 */
    CHECK(uvm_sched_exec_set_insertion(NULL, 0, NULL, 0, 0, 0) == UVM_OK, "cleared");
    CHECK(uvm_sched_exec_arm(&row, 1, sizes, 3, 6, UVM_SYNC_PERIOD_RESYNC, 0, 1) == UVM_OK,
          "re-arm");
    resync_step(0);
    resync_step(0);
    inserted_step(1 << 20);
    CHECK(stat_of("insertions") == 3 && stat_of("insertions_planned") == 1,
          "without a table the stretch runs unplanned");
    uvm_sched_exec_disarm();
}

/* direct calls: counted, recorded (arg -1), ranges checked before the driver sees them */
static void test_direct(const char *backend) {
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
    void *big = uvm_sched_malloc(3 << 20, 0, NULL);
    void *small = uvm_sched_malloc(4096, 0, NULL);
    CHECK(big && small, "malloc");
    uvm_event ev[64];
    uvm_sched_drain(ev, 64);
    CHECK(uvm_sched_prefetch(big, 3 << 20, 0, 0, NULL) == UVM_OK, "prefetch to device");
    CHECK(uvm_sched_prefetch(big, 1 << 20, 1, 0, NULL) == UVM_OK, "prefetch to host");
    CHECK(uvm_sched_advise(big, 3 << 20, UVM_ACT_ADVISE_ACCESSED_BY, 0, 0) == UVM_OK, "advise");
    CHECK(uvm_sched_advise(big, 3 << 20, UVM_ACT_ADVISE_ACCESSED_BY, 1, 0) == UVM_OK, "unset");
    CHECK(uvm_sched_advise(big, 3 << 20, UVM_ACT_DISCARD, 0, 0) == UVM_EINVAL, "not an advice");
    CHECK(uvm_sched_discard(big, 4 << 20, 0, NULL) == UVM_OK, "discard to the page end");
    CHECK(uvm_sched_discard(big, (4 << 20) + 1, 0, NULL) == UVM_EINVAL, "past the block");
    CHECK(uvm_sched_discard(small, 4096, 0, NULL) == UVM_EINVAL, "slab block");
    CHECK(uvm_sched_synchronize(NULL, 0) == UVM_OK, "synchronize");
    int local = 0;
    CHECK(uvm_sched_prefetch(&local, 4, 0, 0, NULL) == UVM_EUNKNOWN, "foreign pointer");
    CHECK(uvm_sched_prefetch(big, 0, 0, 0, NULL) == UVM_EINVAL, "empty range");
    CHECK(uvm_sched_prefetch(big, (size_t)1 << 40, 0, 0, NULL) == UVM_EUNKNOWN, "past arena");
    CHECK(uvm_sched_prefetch(big, 1, 0, -1, NULL) == UVM_EINVAL, "negative device");
    size_t n = uvm_sched_drain(ev, 64);
    int want[] = {UVM_EV_ACTION + UVM_ACT_PREFETCH_TO_DEVICE, UVM_EV_ACTION + UVM_ACT_PREFETCH_TO_HOST,
                  UVM_EV_ACTION + UVM_ACT_ADVISE_ACCESSED_BY, UVM_EV_UNADVISE,
                  UVM_EV_ACTION + UVM_ACT_DISCARD, UVM_EV_SYNC};
    CHECK(n == 6, "direct events recorded: %zu", n);
    for (size_t i = 0; i < n && i < 6; i++)
        CHECK(ev[i].kind == want[i] && ev[i].addr == (i < 5 ? (uint64_t)(uintptr_t)big : 0),
              "event %zu: kind %d", i, ev[i].kind);
    CHECK(ev[0].arg == -1 && ev[3].arg == UVM_ACT_ADVISE_ACCESSED_BY, "args");
    CHECK(stat_of("direct_prefetches") == 2 && stat_of("direct_advises") == 2 &&
              stat_of("direct_discards") == 1 && stat_of("direct_syncs") == 1,
          "direct counters");
    CHECK(stat_of("direct_bytes_discarded") == 4 << 20 && stat_of("direct_failed") == 0,
          "direct bytes");
    uvm_sched_free(big, 3 << 20, 0, NULL);
    uvm_sched_free(small, 4096, 0, NULL);
    CHECK(uvm_sched_release_cached() > 0 && stat_of("direct_releases") == 1, "release");
}

/* streams come and go (CuPy and Numba make them per task): 128 slots must serve any
 * number of streams over time, as long as fewer than 128 hold memory at once */
static void test_many_streams(const char *backend) {
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
    void *keep = uvm_sched_malloc(3 << 20, 0, (void *)(uintptr_t)0x1000);
    int ok = 0;
    for (uintptr_t s = 1; s <= 600; s++) {
        void *stream = (void *)(0x10000 + s * 64);
        size_t n = s % 2 ? 4096 : (3 << 20);
        void *p = uvm_sched_malloc(n, 0, stream);
        ok += p != NULL;
        uvm_sched_free(p, n, 0, stream);
    }
    CHECK(ok == 600, "%d of 600 streams served", ok);
    CHECK(stat_of("allocated_blocks") == 1, "accounting");
    uvm_sched_free(keep, 3 << 20, 0, (void *)(uintptr_t)0x1000);
    /* 200 streams holding a block each at once cannot all have a slot: refused, counted */
    void *held[200];
    int served = 0;
    for (int s = 0; s < 200; s++) {
        held[s] = uvm_sched_malloc(4096, 0, (void *)(uintptr_t)(0x900000 + s * 64));
        served += held[s] != NULL;
    }
    CHECK(served == UVM_MAX_STREAMS - 1, "%d streams at once served", served);
    for (int s = 0; s < 200; s++)
        if (held[s]) uvm_sched_free(held[s], 4096, 0, (void *)(uintptr_t)(0x900000 + s * 64));
    CHECK(stat_of("allocated_blocks") == 0, "all freed");
}

/* The calibration probe (calib.c): no device on the host backend; on the fake driver it
 * recovers the fake clock's default rates (fake_clock.h: h2d 25, d2h 20 GB/s) within its
 * budget, and a refusal half-way leaves the probe's memory freed. */
static void test_calibration(const char *backend) {
    uvm_calibration c;
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset %s", backend);
    int s = uvm_sched_calibrate(0, 0.05, &c);
    if (!strcmp(backend, "host")) {
        CHECK(s == UVM_EUNSUPPORTED, "calibrate on host: %d", s);
        CHECK(strstr(uvm_sched_last_error(), "no device") != NULL, "why: %s",
              uvm_sched_last_error());
        return;
    }
    CHECK(s == UVM_OK, "calibrate: %d %s", s, uvm_sched_last_error());
    CHECK(c.h2d_Bps > 24.9e9 && c.h2d_Bps < 25.1e9, "h2d %g", c.h2d_Bps);
    CHECK(c.d2h_Bps > 19.9e9 && c.d2h_Bps < 20.1e9, "d2h %g", c.d2h_Bps);
    CHECK(c.device_s > 0 && c.device_s <= 0.05, "device time %g s", c.device_s);
    CHECK(c.fault_batch_s > 0 && c.remote_Bps > 0 && c.duplex_Bps > 0, "all measured");
    CHECK(uvm_sched_calibrate(0, 0.001, &c) == UVM_EINVAL, "a budget below 20 ms");
    CHECK(uvm_sched_calibrate(0, 0.05, NULL) == UVM_EINVAL, "no out");
    setenv("FAKE_CUDA_FAIL", "cuMemsetD8Async:2:1", 1); /* CUDA_ERROR_INVALID_VALUE */
    CHECK(uvm_sched_reset(backend, 1) == UVM_OK, "reset with a fault");
    CHECK(uvm_sched_calibrate(0, 0.05, &c) == UVM_EDRIVER, "a refused memset fails the probe");
    CHECK(strstr(uvm_sched_last_error(), "cuMemsetD8Async") != NULL, "names the call: %s",
          uvm_sched_last_error());
    unsetenv("FAKE_CUDA_FAIL");
}

static void test_fake_faults(const char *fake) {
    if (!fake) {
        printf("fake driver cases skipped (UVM_SCHED_LIBCUDA not set)\n");
        return;
    }
    /* the pool tries three times (after a reclaim, after releasing cached arenas) before
     * it gives up: fail the 2nd, 3rd and 4th reservation */
    setenv("FAKE_CUDA_FAIL", "cuMemAllocManaged:2,cuMemAllocManaged:3,cuMemAllocManaged:4", 1);
    setenv("UVM_SCHED_ARENA_BYTES", "8M", 1);
    CHECK(uvm_sched_reset("cuda", 1) == UVM_OK, "cuda backend on the fake: %s",
          uvm_sched_backend_reason());
    void *a = uvm_sched_malloc(6 << 20, 0, NULL);
    void *b = uvm_sched_malloc(6 << 20, 0, NULL); /* second arena: injected OOM */
    void *c = uvm_sched_malloc(6 << 20, 0, NULL); /* the driver recovers */
    CHECK(a && !b && c, "fault injection %p %p %p", a, b, c);
    CHECK(stat_of("n_oom") == 1, "oom counted");
    uvm_sched_free(a, 6 << 20, 0, NULL);
    uvm_sched_free(c, 6 << 20, 0, NULL);
    CHECK(stat_of("allocated_blocks") == 0, "accounting after a fault");
    unsetenv("FAKE_CUDA_FAIL");
    unsetenv("UVM_SCHED_ARENA_BYTES");
    test_executor("cuda");
    test_direct("cuda");
    test_calibration("cuda");
    /* a driver without discard: refused as unsupported, counted */
    setenv("FAKE_CUDA_NO_DISCARD", "1", 1);
    CHECK(uvm_sched_reset("cuda", 1) == UVM_OK, "reset without discard");
    void *d = uvm_sched_malloc(4 << 20, 0, NULL);
    CHECK(uvm_sched_discard(d, 4 << 20, 0, NULL) == UVM_EUNSUPPORTED, "no discard");
    CHECK(stat_of("direct_unsupported") == 1, "unsupported counted");
    uvm_sched_free(d, 4 << 20, 0, NULL);
    unsetenv("FAKE_CUDA_NO_DISCARD");
}

/* Fault sampling under load: two threads make faults while two flush and take, and the
 * allocator fires probes; every fault is taken exactly once (ASan, TSan: the sample table's
 * lock against CUPTI's completion callback). */
typedef int (*fault_fn)(uint64_t, uint64_t, uint32_t, uint32_t);
static fault_fn fake_fault;
static _Atomic int cupti_done;
static _Atomic uint64_t cupti_made, cupti_taken;

static void *cupti_maker(void *arg) {
    uint64_t base = (uint64_t)(uintptr_t)arg;
    for (uint64_t i = 0; i < 20000; i++)
        if (fake_fault(base + i * 4096, i, 1, 0)) cupti_made++;
    return NULL;
}

static void *cupti_taker(void *arg) {
    (void)arg;
    uvm_fault_sample buf[256];
    for (;;) {
        int last = cupti_done;
        CHECK(uvm_sched_cupti_flush() == UVM_OK, "flush: %s", uvm_sched_last_error());
        size_t k;
        while ((k = uvm_sched_cupti_take(buf, 256)) > 0) cupti_taken += k;
        if (last) return NULL;
    }
}

static void test_cupti(const char *fake) {
    if (!fake) {
        printf("fault-sampling cases skipped (UVM_SCHED_LIBCUPTI not set)\n");
        return;
    }
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    void *lib = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s", fake);
    if (!lib) return;
    *(void **)&fake_fault = dlsym(lib, "fake_cupti_fault");
    CHECK(uvm_sched_cupti_flush() == UVM_EINVAL, "flush before start");
    CHECK(uvm_sched_cupti_start(NULL, -1) == UVM_EINVAL, "device -1");
    CHECK(uvm_sched_cupti_start(NULL, 0) == UVM_OK, "start: %s", uvm_sched_last_error());
    uint64_t c, m;
    CHECK(uvm_sched_cupti_clock(&c, &m) == UVM_OK && m > 0, "clock");
    void *w = uvm_sched_malloc(4 << 20, 0, NULL);
    uvm_probe_row rows[2] = {{-1, (uint64_t)(uintptr_t)w, 4 << 20, 0, 0},
                             {3, (uint64_t)(uintptr_t)w, 2 << 20, 0, 0}};
    CHECK(uvm_sched_probe_set(rows, 2) == UVM_OK, "probe_set");
    pthread_t t[4];
    pthread_create(&t[0], NULL, cupti_maker, (void *)(uintptr_t)0x100000000ull);
    pthread_create(&t[1], NULL, cupti_maker, (void *)(uintptr_t)0x200000000ull);
    pthread_create(&t[2], NULL, cupti_taker, NULL);
    pthread_create(&t[3], NULL, cupti_taker, NULL);
    for (int i = 0; i < 2000; i++) {
        if (i % 10 == 0) uvm_sched_step();
        uvm_sched_free(uvm_sched_malloc(1 << 20, 0, NULL), 1 << 20, 0, NULL);
    }
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    cupti_done = 1;
    pthread_join(t[2], NULL);
    pthread_join(t[3], NULL);
    CHECK(uvm_sched_cupti_stop() == UVM_OK, "stop");
    uvm_fault_sample buf[64];
    size_t k;
    while ((k = uvm_sched_cupti_take(buf, 64)) > 0) cupti_taken += k;
    CHECK(cupti_made == 40000 && cupti_taken == cupti_made, "made %llu, taken %llu",
          (unsigned long long)cupti_made, (unsigned long long)cupti_taken);
    uint64_t ps[5];
    CHECK(uvm_sched_probe_stats(ps, 5) == 5 && ps[1] == 2 * 200 + 1, "probes issued %llu",
          (unsigned long long)ps[1]);
    CHECK(uvm_sched_probe_set(NULL, 0) == UVM_OK, "clear");
    uvm_sched_free(w, 4 << 20, 0, NULL);
    dlclose(lib);
}

/* Fault probes of non-persistent blocks (addr 0: the block of an allocator event of the
 * iteration): the address is learned at that event each iteration; a row is skipped where
 * the event was a free, the block is freed before the row's tick, the size differs, or the
 * range now holds another allocation (ordinal).  Bad rows are refused. */
static void test_probe_of_allocation(void) {
    CHECK(uvm_sched_reset("host", 1) == UVM_OK, "reset");
    const uint64_t M = 1 << 20;
    uvm_probe_row bad[2] = {{1, 0, M, 0, -1}, {1, 0, M, 0, 2}};
    CHECK(uvm_sched_probe_set(bad, 1) == UVM_EINVAL, "addr 0 without alloc_event");
    CHECK(uvm_sched_probe_set(bad + 1, 1) == UVM_EINVAL, "probe before its allocation");
    uvm_probe_row rows[7] = {
        {0, 0, M, 0, 0},     /* a, at its allocation: issued */
        {3, 0, M, 0, 0},     /* a, still alive: issued */
        {2, 0, M, 0, 1},     /* b, after its free: skipped */
        {4, 0, M, 0, 2},     /* event 2 is a free: skipped */
        {3, 0, 2 * M, 0, 0}, /* a at another size: skipped */
        {4, 0, M, 0, 3},     /* c: issued */
        {3, 0, M, 0, 1},     /* b's range may hold c now: skipped (ordinal) */
    };
    CHECK(uvm_sched_probe_set(rows, 7) == UVM_OK, "probe_set: %s", uvm_sched_last_error());
    uint64_t before[5], after[5];
    uvm_sched_probe_stats(before, 5);
    for (int it = 0; it < 5; it++) {
        uvm_sched_step();
        void *a = uvm_sched_malloc(M, 0, NULL); /* event 0 */
        void *b = uvm_sched_malloc(M, 0, NULL); /* 1 */
        uvm_sched_free(b, M, 0, NULL);          /* 2 */
        void *c = uvm_sched_malloc(M, 0, NULL); /* 3 */
        uvm_sched_free(a, M, 0, NULL);          /* 4 */
        uvm_sched_free(c, M, 0, NULL);          /* 5 */
    }
    uvm_sched_probe_stats(after, 5);
    CHECK(after[0] == 7 && after[1] - before[1] == 15 && after[2] - before[2] == 20 &&
              after[3] == before[3] && after[4] - before[4] == 15 * M,
          "of-allocation probes: issued %llu skipped %llu failed %llu bytes %llu",
          (unsigned long long)(after[1] - before[1]), (unsigned long long)(after[2] - before[2]),
          (unsigned long long)(after[3] - before[3]), (unsigned long long)(after[4] - before[4]));
    CHECK(uvm_sched_probe_set(NULL, 0) == UVM_OK, "clear");
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    setenv("UVM_SCHED_VERBOSE", "0", 1);
    CHECK(uvm_sched_init("host") == UVM_OK, "init");
    test_size_classes();
    test_bad_input();
    test_limit();
    test_random_model(200000);
    test_ring_overflow();
    test_executor("host");
    test_period_resync("host");
    test_planned_insertion("host");
    test_direct("host");
    test_calibration("host");
    test_many_streams("host");
    test_fake_faults(getenv("UVM_SCHED_LIBCUDA"));
    test_threads(seconds);
    test_cupti(getenv("UVM_SCHED_LIBCUPTI"));
    test_probe_of_allocation();
    test_invariant_check_reports_corruption();
    char why[256] = "";
    CHECK(pool_valid(why, sizeof why), "the pool at the end: %s", why);
#ifdef UVM_SCHED_DEBUG
    CHECK(uvm_pool_broken == 0, "%llu state changes broke a pool invariant (run with "
          "UVM_SCHED_VERBOSE=1 to see which)", (unsigned long long)uvm_pool_broken);
#endif
    uvm_sched_reset("host", 1);
    if (failures) {
        fprintf(stderr, "%d native check(s) failed\n", failures);
        return 1;
    }
    printf("native tests passed\n");
    return 0;
}
