"""The driver's and the link's rules both simulator engines follow, each with its source.

Note [Advice] -- what each advice does to a kernel's access of non-resident bytes, as the
driver does it (CUDA Runtime API, cudaMemAdvise; CUDA Programming Guide, "Unified Memory",
data usage hints):

* ``advise_preferred_host`` (``cudaMemAdviseSetPreferredLocation``, CPU): "If the data is
  already in its preferred location and the faulting processor can establish a mapping
  without requiring the data to be migrated, then data migration will be avoided." The
  first access faults (one fault-batch latency per batch of the bytes), the GPU maps the
  pages and reads/writes them in place; later accesses use the mapping (``mapped``) until
  the pages move (a prefetch, an eviction). Fresh pages are populated on the host.
* ``advise_accessed_by`` (``cudaMemAdviseSetAccessedBy``, the GPU): "it causes the data to
  always be mapped in the specified processor's page tables, as long as the location of
  the data permits a mapping to be established. If the data gets migrated for any reason,
  the mappings are updated accordingly." Bytes living on the host are used in place with
  no fault; a chunk with fresh (never placed) bytes has nothing to map and faults as
  without advice.
* Both: PreferredLocation's rule, with the mapping always there (no fault).
* ``advise_read_mostly`` with either: "If cudaMemAdviseSetReadMostly is also set on this
  memory region or any subset of it, then the policies associated with that advice will
  override the policies of this advice" -- the block faults in as read-mostly data.
* Access counters (``hw.access_counter_migration``, on where the driver enables them by
  default: ATS systems such as Grace Hopper): a chunk read in place through an AccessedBy
  mapping alone is migrated to the device after the kernel, as the fault path would
  (``COUNTER_MIN_BYTES``). Under a CPU preferred location such chunks stay: the driver
  services a counter's notification through the same residency choice as a fault, which
  keeps data in its preferred location when it can be mapped (the rule quoted above) --
  our reading of the driver's sources, to be checked on a GH200.

Not modelled, and why (CUDA Programming Guide, "Unified Memory"; the driver's sources):

* duplicate faults and their replay: a batch's latency (``fault_batch_latency_s``) is
  measured with them inside it; counting them apart needs per-warp access order, which an
  allocator trace does not have;
* the tree prefetcher's levels below a 2 MiB VA block: we model its top decision (a VA
  block past 51% resident is completed); the lower levels change how many bytes a partial
  access brings, and our partial accesses are page-rounded already;
* thrashing detection, throttling and pinning: the driver may throttle a thrashing page
  or pin it on the host and map it remotely, so a demand run that thrashes may be
  simulated slower than the driver runs it. The heuristic (open-gpu-kernel-modules
  uvm_perf_thrashing.c) counts faults per page within time windows, finer than our 2 MiB
  chunks and our per-tick clock; a plan avoids thrashing rather than relying on it;
* host page-table and TLB costs: inside the measured per-batch latency and copy rates;
* access-counter migration between peer GPUs (one GPU is simulated).
The per-call host cost of a prefetch or advise call is modelled (Note [Host calls]).

Note [Read-mostly prefetch to the host] -- a planned eviction (``cudaMemPrefetchAsync`` to
the CPU) of a block under ``advise_read_mostly`` does not free device memory. The CUDA
Runtime API, cudaMemPrefetchAsync: "If cudaMemAdviseSetReadMostly was set on any subset of
this memory range, then that subset will create a read-only copy of the pages on
dstDevice." So the host gets a read-only copy of the bytes it lacks (dirty or never there:
a device->host copy), the device copy stays resident and claimed, and both are valid until
a write collapses them. What does free a clean duplicate at no cost is the driver's own
eviction under pressure (it drops the device copy: ``_evict_chunks``). The planner
therefore does not advise read-mostly on a block it evicts (``planner._actions``).

Note [Host calls] -- the executor makes each prefetch/advise call in the allocator hook, on
the thread that launches the kernels (the C core has no thread of its own),
``hw.action_call_s`` each (an assumed constant with a range, see the profiles), whether or
not the call moves anything: the driver takes the call before it knows. The host keeps its
own clock ``host``, ahead of the GPU while it launches asynchronously. A call ends at
``host += action_call_s``; the action takes effect at the later of that and the GPU's time;
and a tick's kernel, launched after the calls before it, starts no earlier than ``host``:
the GPU's wait for it is the ``host`` stall. The host's clock catches up with the GPU's at
the start of every iteration (a training loop reads its loss, a synchronisation, once a
step), so calls cost the GPU time only where they outpace it within an iteration: many
calls just after the sync, or more call time than GPU time (a plan that is host-bound).
"""
from __future__ import annotations

# Access counters: a notification takes 256 remote accesses to one 2 MiB region (the
# driver's default threshold and granularity, open-gpu-kernel-modules
# uvm_gpu_access_counters.c); a GPU request moves at most 128 bytes, so a kernel that reads
# this many bytes of a chunk in place has surely raised one.
COUNTER_MIN_BYTES = 256 * 128


def copy_end(s: float, nbytes: int, bw: float, other_free: float, other_rate: float,
             cap: float) -> float:
    """End (s) of a copy of ``nbytes`` starting at ``s`` at up to ``bw`` bytes/s while the
    other direction runs at ``other_rate`` until ``other_free``, both together at most
    ``cap`` bytes/s: this copy gets ``cap - other_rate`` (nothing if that is <= 0) until
    ``other_free``, then ``bw``."""
    if s < other_free and bw + other_rate > cap:
        r = cap - other_rate
        if r > 0.0:
            if nbytes <= r * (other_free - s):
                return s + nbytes / r
            return other_free + (nbytes - r * (other_free - s)) / bw
        return other_free + nbytes / bw
    return s + nbytes / bw
