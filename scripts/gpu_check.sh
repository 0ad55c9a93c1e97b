#!/usr/bin/env bash
# The GPU validation kit: build in place, gpu tests, calibration, end-to-end runs,
# the simulator's prediction beside them. Usage:
#   scripts/gpu_check.sh OUTDIR [--dry-run] [--oversubscribe] [--quick]
# Exits 0 with partial results when a step fails (each step is time-boxed and recorded).
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: scripts/gpu_check.sh OUTDIR [--dry-run] [--oversubscribe] [--quick]" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
