// What torch does with the allocator library: call its alloc function and let a C++
// exception propagate.  Usage: torch_shim_check CORE.so SHIM.so BYTES [capture]
// Prints "ptr 0x..." or "caught: <what()>"; "capture" allocates on a fake-driver stream
// in a graph capture (UVM_SCHED_LIBCUDA = the fake driver).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *core = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    void *shim = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!core || !shim) {
        std::printf("dlopen: %s\n", dlerror());
        return 2;
    }
    auto bind = reinterpret_cast<int (*)(void *, void *, void *)>(dlsym(shim, "uvm_sched_torch_bind"));
    auto alloc = reinterpret_cast<void *(*)(size_t, int, void *)>(dlsym(shim, "uvm_sched_torch_malloc"));
    auto release = reinterpret_cast<void (*)(void *, size_t, int, void *)>(
        dlsym(shim, "uvm_sched_torch_free_shim"));
    if (bind(dlsym(core, "uvm_sched_torch_malloc_status"), dlsym(core, "uvm_sched_torch_free"),
             dlsym(core, "uvm_sched_last_error")) != 0)
        return 2;
    size_t bytes = std::strtoull(argv[3], nullptr, 0);
    void *stream = nullptr;
    if (argc > 4 && !std::strcmp(argv[4], "capture")) {
        void *fake = dlopen(std::getenv("UVM_SCHED_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
        if (!fake) return 2;
        stream = reinterpret_cast<void *(*)()>(dlsym(fake, "fake_cuda_stream_create"))();
        reinterpret_cast<void (*)(void *, int)>(dlsym(fake, "fake_cuda_capture"))(stream, 1);
    }
    try {
        void *p = alloc(bytes, 0, stream);
        std::printf("ptr %p\n", p);
        release(p, bytes, 0, stream);
    } catch (const std::exception &e) {
        std::printf("caught: %s\n", e.what());
    }
    return 0;
}
