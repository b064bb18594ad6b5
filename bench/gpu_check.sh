#!/usr/bin/env bash
# The GPU check of issue 29 (bench/gpu_check.py says what it runs and writes).
#
#   bench/gpu_check.sh prepare              here, just before the device call: the wheels the
#                                           device's image lacks and Fashion-MNIST's raw files into
#                                           .gpu-bundle/ (git-ignored), and the size that travels checked
#   bash bench/gpu_check.sh                 on the device machine (the device tool's run, carrying
#                                           .gpu-bundle): every step, results and logs into $OUT
#   bench/gpu_check.sh --cpu-dry-run        here: the same steps on this CPU with a tiny budget,
#                                           into bench/out/gpu-check (or --out DIR)
#
# The device machine's own python3 runs it (it holds PyTorch with CUDA); here
# the checkout's .venv when there is one. GPU_CHECK_PYTHON overrides either.
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
local_python() {
    if [ -n "${GPU_CHECK_PYTHON:-}" ]; then echo "$GPU_CHECK_PYTHON"
    elif [ -x .venv/bin/python ]; then echo .venv/bin/python
    else echo python3; fi
}
case "${1:-}" in
    prepare) shift; exec "$(local_python)" bench/gpu_check.py prepare "$@" ;;
    --cpu-dry-run) shift; exec "$(local_python)" bench/gpu_check.py run --cpu-dry-run "$@" ;;
    *) exec "${GPU_CHECK_PYTHON:-python3}" bench/gpu_check.py run "$@" ;;
esac
