#!/usr/bin/env bash
# Build and run the native tests (pool, ring, executor, fake CUDA driver) under
# AddressSanitizer + UBSan (leak checks on), then under ThreadSanitizer. Usage: scripts/native_tests.sh [seconds of the
# 8-thread test, default 2]. Set UVM_SCHED_NATIVE_BUILD to keep the build directory.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -n "${UVM_SCHED_NATIVE_BUILD:-}" ]]; then
    build="$UVM_SCHED_NATIVE_BUILD"
else
    build="$(mktemp -d)"
    trap 'rm -rf "$build"' EXIT
fi
make -s -C "$here/tests/native" BUILD="$build" THREAD_SECONDS="${1:-2}" check
# the same program under ThreadSanitizer: the 8-thread malloc/free test must show no race
make -s -C "$here/tests/native" BUILD="$build" THREAD_SECONDS="${1:-2}" tsan
