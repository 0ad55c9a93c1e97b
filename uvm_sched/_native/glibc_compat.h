/* Binds the glibc functions whose default symbol version is newer than the wheel's
 * manylinux_2_28 tag promises to their older versions, so the library loads on glibc 2.28.
 *
 * glibc 2.34 moved dlopen/dlsym/dlerror from libdl into libc and gave them the version
 * GLIBC_2.34; a library linked on 2.34+ asks for dlopen@GLIBC_2.34, which glibc <= 2.33
 * lacks ("version `GLIBC_2.34' not found" at import).  The original versions
 * (GLIBC_2.2.5 on x86_64, GLIBC_2.17 on aarch64) stay in every glibc: in libdl.so.2 up to
 * 2.33, in libc.so.6 from 2.34 on, which is why setup.py links libdl.so.2 by name with
 * --no-as-needed (an empty stub on 2.34+).  Same functions, same behaviour: glibc keeps
 * the old version as an alias of the new one.
 *
 * Include it in the file that calls these functions.  scripts/wheel_check.sh fails when
 * any symbol of the built libraries asks for a glibc above 2.28. */
#ifndef UVM_SCHED_GLIBC_COMPAT_H
#define UVM_SCHED_GLIBC_COMPAT_H

#include <dlfcn.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
#if defined(__x86_64__)
#define UVM_GLIBC_DL_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define UVM_GLIBC_DL_VERSION "GLIBC_2.17"
#endif
#ifdef UVM_GLIBC_DL_VERSION
__asm__(".symver dlopen,dlopen@" UVM_GLIBC_DL_VERSION);
__asm__(".symver dlsym,dlsym@" UVM_GLIBC_DL_VERSION);
__asm__(".symver dlerror,dlerror@" UVM_GLIBC_DL_VERSION);
#endif
#endif

#endif
