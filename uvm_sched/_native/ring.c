/* The event ring: fixed 56-byte records, a power-of-two capacity, one producer at a time
 * (whoever holds the allocator lock) and one consumer (drain).  The producer never waits:
 * when the consumer is behind, the new record is dropped and counted in `dropped`, which
 * stats report, so a gap in a trace is always visible. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

int uvm_ring_init(uvm_ring *r, uint64_t cap) {
    uint64_t c = 1024;
    while (c < cap && c < ((uint64_t)1 << 32)) c <<= 1;
    /* mmap: untouched pages of a big ring cost no memory */
    void *buf = mmap(NULL, c * sizeof(uvm_event), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buf == MAP_FAILED) {
        uvm_set_error("cannot map an event ring of %llu records", (unsigned long long)c);
        return UVM_ENOMEM;
    }
    r->buf = buf;
    r->cap = c;
    r->mask = c - 1;
    atomic_store(&r->head, 0);
    atomic_store(&r->tail, 0);
    r->dropped = 0;
    r->recorded = 0;
    return UVM_OK;
}

void uvm_ring_fini(uvm_ring *r) {
    if (r->buf) munmap(r->buf, r->cap * sizeof(uvm_event));
    memset(r, 0, sizeof *r);
}
