/* prim "host": managed memory emulated with anonymous mmap(MAP_NORESERVE), so the whole
 * stack (pool, ring, executor) runs and is tested on a machine without a GPU.
 * Migrations, advice and discards are accepted and not executed: the executor records
 * every issued action in the event ring, which is what tests and replays compare. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

static int host_alloc(int device, size_t bytes, void **out) {
    (void)device;
    /* MAP_NORESERVE: like managed memory, pages cost nothing until touched, so big
     * arenas are cheap and swap accounting does not refuse them. */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        uvm_set_error("mmap of %zu bytes failed: %s", bytes, strerror(errno));
        return UVM_ENOMEM;
    }
    *out = p;
    return UVM_OK;
}

static int host_free(void *p, size_t bytes) {
    if (munmap(p, bytes) != 0) {
        uvm_set_error("munmap of %p (%zu bytes) failed: %s", p, bytes, strerror(errno));
        return UVM_EDRIVER;
    }
    return UVM_OK;
}

static int host_prefetch(int device, void *p, size_t bytes, int to_host, void *stream) {
    (void)device, (void)p, (void)bytes, (void)to_host, (void)stream;
    return UVM_OK;
}

static int host_advise(int device, void *p, size_t bytes, int advice) {
    (void)device, (void)p, (void)bytes, (void)advice;
    return UVM_OK;
}

static int host_discard(int device, void *p, size_t bytes, void *stream) {
    (void)device, (void)p, (void)bytes, (void)stream;
    return UVM_OK;
}

/* Streams and events are distinct tokens; host work is synchronous, so every event has
 * always completed. */
static int host_token(int device, void **out) {
    (void)device;
    void *t = malloc(1);
    if (!t) return UVM_ENOMEM;
    *out = t;
    return UVM_OK;
}

static int host_token_free(void *t) {
    free(t);
    return UVM_OK;
}

static int host_record(void *ev, void *stream) {
    (void)ev, (void)stream;
    return UVM_OK;
}

static int host_one(void *ev) {
    (void)ev;
    return UVM_OK;
}

static int host_device_sync(int device) {
    (void)device;
    return UVM_OK;
}

static void host_shutdown(void) {}

const uvm_prim uvm_prim_host = {
    .name = "host",
    .alloc_managed = host_alloc,
    .free_managed = host_free,
    .prefetch = host_prefetch,
    .advise = host_advise,
    .discard = host_discard,
    .stream_create = host_token,
    .stream_destroy = host_token_free,
    .event_create = host_token,
    .event_destroy = host_token_free,
    .event_record = host_record,
    .stream_wait_event = host_record,
    .event_query = host_one,
    .event_sync = host_one,
    .device_sync = host_device_sync,
    .shutdown = host_shutdown,
};
