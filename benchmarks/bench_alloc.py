"""Allocator speed: median ns per malloc+free pair, uvm_sched (host backend, tracing on)
against glibc malloc/free, in the same run, single-threaded and with 2 threads, and with a
plan armed in the executor against none.

What runs: a small C program (compiled here with the system compiler, source below) that
dlopens the built uvm_sched library and replays one pre-generated operation sequence
through each allocator, so the figures are the allocators' own cost (no Python or ctypes
in the timed loop). The sequence is a DNN-like mix: mostly small blocks (bias, norm,
small activations), some MiB-sized activations and a few large ones up to 256 MiB,
freed mostly LIFO (the backward pass frees in reverse) with some out-of-order frees.
A second mix keeps only blocks <= 64 KiB: glibc's best case. The ring is drained between
repetitions (not timed), so tracing always writes records.

    python benchmarks/bench_alloc.py [--reps 15] [--pairs 200000] [--save]

Targets (issue 2 and 5): <= 150 ns per pair single-threaded, within 2x of glibc, and a
plan armed within 20% of the same run without one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

DRIVER_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { int64_t tick; int32_t action, persistent; int64_t block;
                 uint64_t offset, bytes, addr; } row_t;
static void *(*u_malloc)(size_t, int, void *);
static void (*u_free)(void *, size_t, int, void *);
static int (*u_init)(const char *);
static size_t (*u_drain)(void *, size_t);
static int (*u_arm)(const row_t *, size_t, const uint64_t *, size_t, uint64_t, int, int, int);
static int (*u_disarm)(void);
static size_t (*u_stats)(uint64_t *, size_t);
static const char *(*u_stats_names)(void);

typedef struct { int32_t slot; uint32_t size; } op_t; /* size > 0: malloc into slot; 0: free */

static uint64_t rs;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

static uint32_t draw(int small_only) {
    uint64_t r = rnd(), u = rnd() % 1000;
    if (small_only || u < 700) { /* 70%: 256 B .. 64 KiB, log-uniform */
        int e = 8 + (int)(r % 9);
        return (uint32_t)((1u << e) + rnd() % (1u << e));
    }
    if (u < 960) { /* 26%: 64 KiB .. 8 MiB */
        int e = 16 + (int)(r % 7);
        return (uint32_t)((1u << e) + rnd() % (1u << e));
    }
    int e = 23 + (int)(r % 5); /* 4%: 8 .. 256 MiB */
    return (uint32_t)((1u << e) + rnd() % (1u << e));
}

/* pairs mallocs, each freed once; at most 256 live; LIFO 80% */
static op_t *make_ops(size_t pairs, int small_only, uint64_t seed, size_t *n_out) {
    op_t *ops = malloc(sizeof(op_t) * pairs * 2);
    int32_t stack[256]; int live = 0; size_t n = 0, made = 0;
    rs = seed;
    int32_t next_slot = 0;
    int32_t free_slots[256]; int nfree = 256;
    for (int i = 0; i < 256; i++) free_slots[i] = 255 - i;
    (void)next_slot;
    while (made < pairs || live) {
        int do_alloc = made < pairs && live < 256 && (live < 8 || rnd() % 100 < 50);
        if (do_alloc) {
            int32_t s = free_slots[--nfree];
            ops[n++] = (op_t){s, draw(small_only)};
            stack[live++] = s; made++;
        } else {
            int k = rnd() % 100 < 80 ? live - 1 : (int)(rnd() % live);
            int32_t s = stack[k];
            memmove(&stack[k], &stack[k + 1], sizeof(int32_t) * (live - k - 1));
            live--;
            ops[n++] = (op_t){s, 0};
            free_slots[nfree++] = s;
        }
    }
    *n_out = n;
    return ops;
}

/* single thread: CPU time of the thread (the machine may be shared; time spent
   descheduled is not the allocator's); 2 threads: wall time (lock waits count) */
static int use_cpu_clock;
static double now(void) { struct timespec t; clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

typedef struct { const op_t *ops; size_t n; int which; double secs; void *stream; } job_t;

static void run(job_t *j) {
    void *ptr[256]; uint32_t sz[256];
    double t0 = now();
    if (j->which == 0) {
        for (size_t i = 0; i < j->n; i++) {
            op_t o = j->ops[i];
            if (o.size) { ptr[o.slot] = u_malloc(o.size, 0, j->stream); sz[o.slot] = o.size;
                          if (!ptr[o.slot]) { fprintf(stderr, "uvm_sched malloc failed\n"); exit(3); } }
            else u_free(ptr[o.slot], sz[o.slot], 0, j->stream);
        }
    } else {
        for (size_t i = 0; i < j->n; i++) {
            op_t o = j->ops[i];
            if (o.size) { ptr[o.slot] = malloc(o.size);
                          if (!ptr[o.slot]) { fprintf(stderr, "malloc failed\n"); exit(3); } }
            else free(ptr[o.slot]);
        }
    }
    j->secs = now() - t0;
}

static void *thread_main(void *a) { run(a); return NULL; }

static void *drain_buf;
static void drain(void) { while (u_drain(drain_buf, 1 << 20) == (1 << 20)) {} }

static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }

/* ns per pair of one repetition; threads each replay their own sequence */
static double bench1(op_t **ops, size_t *n, size_t pairs, int which, int threads) {
    job_t jobs[2]; pthread_t th[2];
    use_cpu_clock = threads == 1;
    for (int t = 0; t < threads; t++)
        jobs[t] = (job_t){ops[t], n[t], which, 0, (void *)(uintptr_t)(t * 16)};
    double t0 = now();
    if (threads == 1) run(&jobs[0]);
    else {
        for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, thread_main, &jobs[t]);
        for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    }
    double secs = threads == 1 ? jobs[0].secs : now() - t0;
    if (which == 0) drain();
    return secs * 1e9 / (double)pairs;
}

static double median(double *v, int n) { qsort(v, n, sizeof(double), cmp); return v[n / 2]; }

/* medians of a and b, measured alternately so both see the same machine load */
static void bench2(op_t **ops, size_t *n, size_t pairs, int wa, int wb, int threads, int reps,
                   double *ma, double *mb) {
    double a[64], b[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        a[r] = bench1(ops, n, pairs, wa, threads);
        b[r] = bench1(ops, n, pairs, wb, threads);
    }
    *ma = median(a, reps);
    *mb = median(b, reps);
}

static uint64_t stat(const char *name) {
    uint64_t v[128]; size_t m = u_stats(v, 128); const char *s = u_stats_names(); size_t l = strlen(name);
    for (size_t i = 0; i < m; i++) { if (!strncmp(s, name, l) && s[l] == ',') return v[i]; s = strchr(s, ',') + 1; }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: driver LIB PAIRS REPS\n"); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    *(void **)&u_malloc = dlsym(lib, "uvm_sched_malloc");
    *(void **)&u_free = dlsym(lib, "uvm_sched_free");
    *(void **)&u_init = dlsym(lib, "uvm_sched_init");
    *(void **)&u_drain = dlsym(lib, "uvm_sched_drain");
    *(void **)&u_arm = dlsym(lib, "uvm_sched_exec_arm");
    *(void **)&u_disarm = dlsym(lib, "uvm_sched_exec_disarm");
    *(void **)&u_stats = dlsym(lib, "uvm_sched_stats");
    *(void **)&u_stats_names = dlsym(lib, "uvm_sched_stats_names");
    size_t pairs = strtoull(argv[2], 0, 10); int reps = atoi(argv[3]);
    if (u_init("host") != 0) { fprintf(stderr, "uvm_sched_init(host) failed\n"); return 2; }
    drain_buf = malloc(56u << 20);
    for (int small = 0; small < 2; small++) {
        op_t *ops[2]; size_t n[2];
        ops[0] = make_ops(pairs, small, 12345, &n[0]);
        ops[1] = make_ops(pairs, small, 67890, &n[1]);
        const char *mix = small ? "small" : "dnn";
        /* warm both allocators (arenas reserved, glibc heap grown) */
        bench1(ops, n, pairs, 0, 1); bench1(ops, n, pairs, 1, 1);
        for (int threads = 1; threads <= 2; threads++) {
            double u, g;
            bench2(ops, n, pairs, 0, 1, threads, reps, &u, &g);
            printf("{\"mix\": \"%s\", \"threads\": %d, \"plan\": false, \"uvm_sched_ns\": %.2f, \"glibc_ns\": %.2f}\n",
                   mix, threads, u, g);
        }
        /* plan armed: the sequence is one iteration (sync=period), every alloc checked
           against alloc_sizes, and one prefetch_to_host per 16 events, on the block the
           event just allocated (or the latest live one) */
        size_t na = 0; for (size_t i = 0; i < n[0]; i++) na += ops[0][i].size != 0;
        uint64_t *sizes = malloc(sizeof(uint64_t) * na);
        row_t *rows = calloc(n[0] / 16 + 1, sizeof(row_t)); size_t nr = 0, j = 0;
        for (size_t i = 0; i < n[0]; i++) {
            if (ops[0][i].size) {
                sizes[j] = ops[0][i].size;
                if (i % 16 == 0) rows[nr++] = (row_t){(int64_t)i, 1, 0, (int64_t)j, 0, 0, 0};
                j++;
            }
        }
        double offs[64], ons[64];
        uint64_t issued = 0, div = 0;
        int R = reps > 64 ? 64 : reps;
        for (int r = 0; r < R; r++) { /* alternate: unarmed, armed */
            u_disarm();
            offs[r] = bench1(ops, n, pairs, 0, 1);
            if (u_arm(rows, nr, sizes, na, n[0], 1, 0, 1) != 0) { fprintf(stderr, "arm failed\n"); return 2; }
            uint64_t i0 = stat("actions_issued"), d0 = stat("divergences");
            ons[r] = bench1(ops, n, pairs, 0, 1);
            issued += stat("actions_issued") - i0; div += stat("divergences") - d0;
        }
        u_disarm();
        double off = median(offs, R), on = median(ons, R);
        printf("{\"mix\": \"%s\", \"threads\": 1, \"plan\": true, \"uvm_sched_ns\": %.2f, \"unarmed_ns\": %.2f, "
               "\"actions_per_iteration\": %zu, \"actions_issued\": %llu, \"divergences\": %llu}\n",
               mix, on, off, nr, (unsigned long long)issued, (unsigned long long)div);
        free(sizes); free(rows); free(ops[0]); free(ops[1]);
    }
    printf("{\"events_dropped\": %llu, \"events_recorded\": %llu}\n",
           (unsigned long long)stat("events_dropped"), (unsigned long long)stat("events_recorded"));
    return 0;
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200_000, help="malloc+free pairs per repetition")
    ap.add_argument("--reps", type=int, default=15, help="repetitions (the median is reported)")
    ap.add_argument("--save", action="store_true",
                    help="also write benchmarks/results/bench_alloc.{json,md}")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from uvm_sched.native import library_path

    lib = library_path()
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        print(f"bench_alloc: no C compiler ({cc}) to build the benchmark driver", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bench_alloc.c"
        exe = Path(tmp) / "bench_alloc"
        src.write_text(DRIVER_C)
        subprocess.run([cc, "-O2", "-std=c11", "-pthread", "-o", str(exe), str(src), "-ldl"],
                       check=True)
        env = dict(os.environ, UVM_SCHED_TRACE="1", UVM_SCHED_VERBOSE="1")
        out = subprocess.run([str(exe), lib, str(args.pairs), str(args.reps)], env=env,
                             check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    ring = rows.pop()
    print(f"uvm_sched allocator benchmark: median ns per malloc+free pair over {args.reps} "
          f"repetitions of {args.pairs:,} pairs (host backend, tracing on; {os.cpu_count()} CPUs)")
    print(f"{'mix':6} {'threads':>7} {'uvm_sched':>10} {'glibc':>8} {'ratio':>6}")
    for r in rows:
        if not r["plan"]:
            r["ratio_vs_glibc"] = r["uvm_sched_ns"] / r["glibc_ns"]
            print(f"{r['mix']:6} {r['threads']:>7} {r['uvm_sched_ns']:>10.1f} {r['glibc_ns']:>8.1f} "
                  f"{r['ratio_vs_glibc']:>6.2f}")
    print("\nplan armed (1 thread):")
    print(f"{'mix':6} {'unarmed':>8} {'armed':>8} {'ratio':>6}  actions/iteration, issued, divergences")
    for r in rows:
        if r["plan"]:
            r["ratio_armed"] = r["uvm_sched_ns"] / r["unarmed_ns"]
            print(f"{r['mix']:6} {r['unarmed_ns']:>8.1f} {r['uvm_sched_ns']:>8.1f} "
                  f"{r['ratio_armed']:>6.2f}  {r['actions_per_iteration']:,}, "
                  f"{r['actions_issued']:,}, {r['divergences']}")
    print(f"\nring: {ring['events_recorded']:,} events recorded, {ring['events_dropped']:,} dropped")
    dnn1 = next(r for r in rows if r["mix"] == "dnn" and r["threads"] == 1 and not r["plan"])
    armed = next(r for r in rows if r["mix"] == "dnn" and r["plan"])
    checks = [
        (f"single-thread dnn mix <= 150 ns/pair: {dnn1['uvm_sched_ns']:.1f}", dnn1["uvm_sched_ns"] <= 150),
        (f"within 2x of glibc: {dnn1['ratio_vs_glibc']:.2f}x", dnn1["ratio_vs_glibc"] <= 2.0),
        (f"plan armed within 20%: {armed['ratio_armed']:.2f}x", armed["ratio_armed"] <= 1.2),
    ]
    for text, ok in checks:
        print(("MET    " if ok else "MISSED ") + text)
    if args.save:
        res = REPO / "benchmarks" / "results"
        res.mkdir(parents=True, exist_ok=True)
        doc = {"pairs": args.pairs, "reps": args.reps, "cpus": os.cpu_count(), "rows": rows,
               "ring": ring}
        (res / "bench_alloc.json").write_text(json.dumps(doc, indent=1))
        md = ["| mix | threads | uvm_sched ns/pair | glibc ns/pair | ratio |", "|---|---|---|---|---|"]
        md += [f"| {r['mix']} | {r['threads']} | {r['uvm_sched_ns']:.1f} | {r['glibc_ns']:.1f} | "
               f"{r['ratio_vs_glibc']:.2f} |" for r in rows if not r["plan"]]
        md += ["", "| mix | unarmed ns | armed ns | ratio |", "|---|---|---|---|"]
        md += [f"| {r['mix']} | {r['unarmed_ns']:.1f} | {r['uvm_sched_ns']:.1f} | {r['ratio_armed']:.2f} |"
               for r in rows if r["plan"]]
        (res / "bench_alloc.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
