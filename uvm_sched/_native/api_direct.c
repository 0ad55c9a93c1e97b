/* The direct calls of the ABI: prefetch, advise, discard and synchronize asked for by the
 * application (not a plan), each checked against the pool before the driver sees it,
 * counted and recorded in the event ring.  Same rules as api.c: the global lock around
 * pool and ring, a status returned, nothing aborts. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- direct calls ------------------------------------------------------------------------ */
/* lock held: the outcome of a direct call, counted and recorded */
static int direct_done(int s, int act, int unset, void *p, uint64_t bytes, void *stream,
                       int device) {
    uvm_direct_stats *d = &uvm_g.direct;
    uint64_t st = (uint64_t)(uintptr_t)stream;
    if (s == UVM_OK) {
        if (act == UVM_ACT_PREFETCH_TO_DEVICE || act == UVM_ACT_PREFETCH_TO_HOST) {
            d->prefetches++;
            *(act == UVM_ACT_PREFETCH_TO_HOST ? &d->bytes_d2h : &d->bytes_h2d) += bytes;
        } else if (act == UVM_ACT_DISCARD) {
            d->discards++;
            d->bytes_discarded += bytes;
        } else {
            d->advises++;
            d->bytes_advised += bytes;
        }
        uvm_trace(unset ? UVM_EV_UNADVISE : UVM_EV_ACTION + act, (uint64_t)(uintptr_t)p, bytes,
                  st, device, unset ? act : -1);
    } else if (s == UVM_EUNSUPPORTED) {
        d->unsupported++;
        uvm_trace(UVM_EV_UNSUPPORTED, (uint64_t)(uintptr_t)p, bytes, st, device, -1 - act);
    } else {
        d->failed++;
        uvm_trace(UVM_EV_ACTION_FAILED, (uint64_t)(uintptr_t)p, bytes, st, device, -1 - act);
    }
    return s;
}

/* lock held: the checks every direct call makes before the driver sees it */
static int direct_check(const char *what, void *p, size_t bytes, int device) {
    if (device < 0) {
        uvm_set_error("%s: device must be >= 0, got %d", what, device);
        return UVM_EINVAL;
    }
    if (bytes == 0) {
        uvm_set_error("%s: empty range at %p (0 bytes)", what, p);
        return UVM_EINVAL;
    }
    int s = uvm_pool_check_range(&uvm_g.pool, p, bytes);
    if (s != UVM_OK) {
        char why[320];
        snprintf(why, sizeof why, "%s", uvm_sched_last_error());
        uvm_set_error("%s: %s", what, why);
    }
    return s;
}

int uvm_sched_prefetch(void *ptr, size_t bytes, int to_host, int device, void *stream) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int s = direct_check("prefetch", ptr, bytes, device);
    /* a request refused before the driver saw it is the caller's mistake: not recorded */
    if (s == UVM_OK)
        s = direct_done(uvm_g.prim->prefetch(device, ptr, bytes, to_host != 0, stream),
                        to_host ? UVM_ACT_PREFETCH_TO_HOST : UVM_ACT_PREFETCH_TO_DEVICE, 0, ptr,
                        bytes, stream, device);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_advise(void *ptr, size_t bytes, int action, int unset, int device) {
    int adv;
    switch (action) {
    case UVM_ACT_ADVISE_PREFERRED_HOST:
        adv = unset ? UVM_ADV_UNSET_PREFERRED : UVM_ADV_PREFERRED_HOST;
        break;
    case UVM_ACT_ADVISE_ACCESSED_BY:
        adv = unset ? UVM_ADV_UNSET_ACCESSED_BY : UVM_ADV_ACCESSED_BY;
        break;
    case UVM_ACT_ADVISE_READ_MOSTLY:
        adv = unset ? UVM_ADV_UNSET_READ_MOSTLY : UVM_ADV_READ_MOSTLY;
        break;
    default:
        uvm_set_error("advise: action %d is not an advice (%d, %d or %d)", action,
                      UVM_ACT_ADVISE_PREFERRED_HOST, UVM_ACT_ADVISE_ACCESSED_BY,
                      UVM_ACT_ADVISE_READ_MOSTLY);
        return UVM_EINVAL;
    }
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int s = direct_check("advise", ptr, bytes, device);
    if (s == UVM_OK)
        s = direct_done(uvm_g.prim->advise(device, ptr, bytes, adv), action, unset != 0, ptr,
                        bytes, NULL, device);
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_discard(void *ptr, size_t bytes, int device, void *stream) {
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    int s = direct_check("discard", ptr, bytes, device);
    if (s == UVM_OK) {
        uvm_block b;
        int o = uvm_pool_owner(&uvm_g.pool, ptr, &b);
        if (o != UVM_OK) {
            uvm_set_error("discard: %p is in no live block (only the data of a live block of "
                          "yours may be discarded)", ptr);
            s = UVM_EINVAL;
        } else if (b.capacity < UVM_PAGE) {
            uvm_set_error("discard: the block at %p (%llu bytes) shares its 2 MiB page with other "
                          "blocks; only blocks over 1 MiB own their pages and can be discarded",
                          b.addr, (unsigned long long)b.req);
            s = UVM_EINVAL;
        } else if ((uint64_t)((char *)ptr - (char *)b.addr) + bytes > b.capacity) {
            uvm_set_error("discard: [%p, +%zu bytes) runs past the end of its block (%p, %llu "
                          "bytes on %llu bytes of pages)", ptr, bytes, b.addr,
                          (unsigned long long)b.req, (unsigned long long)b.capacity);
            s = UVM_EINVAL;
        } else {
            s = direct_done(uvm_g.prim->discard(device, ptr, bytes, stream), UVM_ACT_DISCARD, 0,
                            ptr, bytes, stream, device);
        }
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

int uvm_sched_synchronize(void *stream, int device) {
    if (device < 0) {
        uvm_set_error("synchronize: device must be >= 0, got %d", device);
        return UVM_EINVAL;
    }
    pthread_mutex_lock(&uvm_g.lock);
    UVM_ENSURE_READY();
    const uvm_prim *prim = uvm_g.prim;
    pthread_mutex_unlock(&uvm_g.lock);
    /* an event of its own per call, and no lock while waiting: other threads keep
     * allocating, and a concurrent synchronize cannot re-record our event */
    void *ev = NULL;
    int s = prim->event_create(device, &ev);
    if (s == UVM_OK) s = prim->event_record(ev, stream);
    if (s == UVM_OK) s = prim->event_sync(ev);
    if (ev) prim->event_destroy(ev);
    pthread_mutex_lock(&uvm_g.lock);
    if (s == UVM_OK) {
        uvm_g.direct.syncs++;
        uvm_trace(UVM_EV_SYNC, 0, 0, (uint64_t)(uintptr_t)stream, device, 0);
    } else {
        uvm_g.direct.failed++;
        uvm_trace(UVM_EV_DRIVER_ERROR, 0, 0, (uint64_t)(uintptr_t)stream, device, s);
    }
    pthread_mutex_unlock(&uvm_g.lock);
    return s;
}

