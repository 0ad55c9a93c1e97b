/* What the pool's files share (pool.c: the design and the entry points api.c calls;
 * pool_pages.c: bins, runs, arenas, taking and giving back pages; pool_streams.c: stream
 * slots, reclaim, slabs; pool_check.c: the invariant check).  Hidden like the rest of
 * internal.h; every function expects the global lock held. */
#ifndef UVM_SCHED_POOL_H
#define UVM_SCHED_POOL_H

#include "internal.h"

/* ---- pool_pages.c ---- */
UVM_HIDDEN int uvm_bin_of(uint64_t npages); /* the size bin of a free run of npages */
UVM_HIDDEN void uvm_bin_remove(uvm_bins *B, uvm_run *r);
/* Put a run back as free memory tagged `tag`, merging with free neighbours whose tags
 * allow it (only_untagged: merge with untagged neighbours only, for reclaim). */
UVM_HIDDEN void uvm_run_make_free(uvm_pool *p, uvm_run *r, int tag, bool only_untagged);
/* The arena holding address x, or NULL. */
UVM_HIDDEN uvm_arena *uvm_find_arena(uvm_pool *p, uintptr_t x);
/* A run of n pages for stream slot `slot`, counted in use: UVM_OK and *out, or the
 * status that stopped the fallback ladder (UVM_ENOMEM, a driver error). */
UVM_HIDDEN int uvm_take_pages(uvm_pool *p, uint64_t n, int slot, int device, uvm_run **out);
UVM_HIDDEN void uvm_give_pages(uvm_pool *p, uvm_run *r, int tag);
/* Note that the driver was told to discard [addr, addr + bytes) (the executor, at a free):
 * uvm_take_pages populates those pages before it hands them out again. */
UVM_HIDDEN void uvm_pages_discarded(uvm_pool *p, const void *addr, uint64_t bytes);

/* ---- pool_streams.c ---- */
/* The slot of (stream handle, device), made on first use; -1 when none is left. */
UVM_HIDDEN int uvm_slot_of(uvm_pool *p, void *handle, int device);
/* Wait for the work queued so far on stream, one the caller gave in this very call. */
UVM_HIDDEN int uvm_wait_stream(uvm_pool *p, void *stream, int device);
/* Make the free memory of every slot but `slot` untagged (after a device wait). */
UVM_HIDDEN void uvm_reclaim(uvm_pool *p, int slot);
UVM_HIDDEN void uvm_release_empty_slabs(uvm_pool *p, int except_slot);
UVM_HIDDEN int uvm_slab_new(uvm_pool *p, int slot, int cls, int device, uvm_slab **out);
UVM_HIDDEN void uvm_slab_unlink(uvm_pool *p, uvm_slab *sl);
UVM_HIDDEN void uvm_slab_push(uvm_pool *p, uvm_slab *sl);
UVM_HIDDEN void uvm_slab_destroy(uvm_pool *p, uvm_slab *sl);

#endif
