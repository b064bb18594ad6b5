#!/usr/bin/env bash
# The GPU check (docs/gpu.md; bench/gpu_check.py says what it runs and writes).
#
#   bash bench/gpu_check.sh --out DIR [--steps a,b] [--bundle DIR]   on a machine with one NVIDIA GPU: every step,
#                                                                   gpu_check.json and the logs in DIR
#   bash bench/gpu_check.sh --cpu-dry-run [--out DIR]               anywhere: the same steps on the CPU, tiny
#   bash bench/gpu_check.sh --list-steps                            the steps, what each measures, their caps
#   bash bench/gpu_check.sh prepare [--max-mib N] [...]             where there is network: the offline bundle
#                                                                   for a GPU node without (.gpu-bundle/)
#
# The interpreter: $GPU_CHECK_PYTHON, else the checkout's .venv (make setup),
# else python3 (a GPU node's own Python with its CUDA build of torch).
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONUNBUFFERED=1
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then python="$GPU_CHECK_PYTHON"
elif [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"
else python=python3; fi
case "${1:-}" in
    prepare) shift; exec "$python" "$root/bench/gpu_check.py" prepare "$@" ;;
    *) exec "$python" "$root/bench/gpu_check.py" run "$@" ;;
esac
