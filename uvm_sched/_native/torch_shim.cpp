// The library PyTorch's CUDAPluggableAllocator loads (uvm_sched.integrations.torch).
//
// torch's CUDAPluggableAllocator::malloc does not check the pointer its alloc function
// returns: a NULL would become a tensor at address 0, and the first kernel to touch it
// would kill the CUDA context.  The C core returns statuses and never throws, so this
// shim, the one C++ file, turns a refused allocation into a C++ exception, which torch
// carries up to Python as a RuntimeError with our message (the bytes, the device, why),
// before any kernel runs.  The C functions it calls are handed over by
// uvm_sched_torch_bind (from Python, the addresses in the loaded core library): this
// library links against nothing of ours.
#include <cstddef>
#include <cstdio>
#include <stdexcept>

#define UVM_SHIM_API extern "C" __attribute__((visibility("default")))

namespace {
using malloc_status_fn = int (*)(std::size_t, int, void *, void **);
using free_fn = void (*)(void *, std::size_t, int, void *);
using error_fn = const char *(*)();
malloc_status_fn g_malloc = nullptr;
free_fn g_free = nullptr;
error_fn g_error = nullptr;
constexpr int kNoMem = -2;      // UVM_ENOMEM
constexpr int kUnsupported = -4; // UVM_EUNSUPPORTED
}  // namespace

// Bind the core's uvm_sched_torch_malloc_status, uvm_sched_torch_free and
// uvm_sched_last_error; returns 0, or -1 when one is missing.
UVM_SHIM_API int uvm_sched_torch_bind(void *malloc_status, void *free, void *last_error) {
    if (!malloc_status || !free || !last_error) return -1;
    g_malloc = reinterpret_cast<malloc_status_fn>(malloc_status);
    g_free = reinterpret_cast<free_fn>(free);
    g_error = reinterpret_cast<error_fn>(last_error);
    return 0;
}

// torch: void* alloc(size_t size, int device, cudaStream_t stream); throws instead of NULL.
UVM_SHIM_API void *uvm_sched_torch_malloc(std::size_t size, int device, void *stream) {
    if (!g_malloc)
        throw std::runtime_error("uvm_sched: the PyTorch allocator library is not bound to "
                                 "the core (use uvm_sched.integrations.torch.allocator())");
    void *p = nullptr;
    int s = g_malloc(size, device, stream, &p);
    if (s == 0 && (p || size == 0)) return p;
    char msg[768];
    std::snprintf(msg, sizeof msg, "uvm_sched: %s %zu bytes on CUDA device %d: %s (status %d)",
                  s == kNoMem ? "CUDA out of memory: cannot allocate"
                  : s == kUnsupported ? "refused to allocate" : "cannot allocate",
                  size, device, g_error && *g_error() ? g_error() : "no reason given", s);
    throw std::runtime_error(msg);
}

// torch: void free(void* ptr, size_t size, int device, cudaStream_t stream)
UVM_SHIM_API void uvm_sched_torch_free_shim(void *ptr, std::size_t size, int device,
                                            void *stream) {
    if (g_free) g_free(ptr, size, device, stream);
}
