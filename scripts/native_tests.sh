#!/usr/bin/env bash
# Build and run the native tests (pool, ring, executor, fake CUDA driver) under
# AddressSanitizer + UBSan. Usage: scripts/native_tests.sh [thread-test seconds, default 2]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${UVM_SCHED_NATIVE_BUILD:-$(mktemp -d)}"
make -s -C "$here/tests/native" BUILD="$build" THREAD_SECONDS="${1:-2}" check
