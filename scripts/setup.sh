#!/usr/bin/env bash
# Create the project's environment in .venv from requirements.txt + constraints.txt,
# install dawnpipe itself (editable), and, where apt is usable, the Debian packages
# with Fashion-MNIST (the default run offline) and chromium (the browser test).
#   PYTHON=python3.11 scripts/setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup: dawnpipe needs Python >= 3.11 ($PYTHON is $("$PYTHON" -V 2>&1))" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV with $("$PYTHON" -V)"
    "$PYTHON" -m venv "$VENV"
fi
# Debian packages, where apt is usable (never fatal: no root, no apt or no
# network all just skip them, saying so):
# - dataset-fashion-mnist: the default run offline (without it the fetch stage
#   downloads the official files);
# - chromium: the browser the leaderboard page's real-browser test drives
#   through Playwright (tests/test_page_browser.py; it fails saying so without it).
# They install in the background while pip fills the venv (each mostly waits
# on its downloads and the disk, on a machine of few cores).
debian_packages() {
    missing=()
    [ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" = 0 ] || SUDO="sudo -n"
        if $SUDO true 2>/dev/null; then
            for pkg in "${missing[@]}"; do
                echo "setup: installing the Debian package $pkg"
                if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg" >/dev/null 2>&1; then
                    $SUDO apt-get update -qq >/dev/null 2>&1 || true
                    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg" >/dev/null 2>&1 \
                        || echo "setup: $pkg not installed"
                fi
            done
        fi
    fi
}
debian_packages &
debian=$!
trap 'wait' EXIT  # never leave apt-get half done behind, whatever stops this script

"$VENV/bin/python" -m pip install --quiet --upgrade pip
echo "setup: installing requirements.txt (pinned by constraints.txt)"
# constraints.txt pins the whole environment, and pip unpacks and compiles one
# package at a time: first the pins in three parts side by side, each package as
# pinned, without resolving. The parts take every third pin, which spreads the
# large wheels that sort next to each other (torch's NVIDIA libraries) over all
# three; where torch, TensorFlow and triton land depends on their lines in
# constraints.txt. On a 2-core machine three parts filled a fresh venv in 92 and
# 108 s where two took 127 and 130 s (the whole setup: 129 s against 136 s).
# Where a pin has no wheel for this machine (another platform than the one
# `make lock` ran on), its part installs nothing and says so. Then pip resolves
# requirements.txt as usual, which installs whatever is still missing and finds
# the rest in place.
PARTS=3
lock=$(mktemp -d)
for part in $(seq 0 $((PARTS - 1))); do : >"$lock/part$part.txt"; done  # each exists, even where it gets no pin
grep -E '^[A-Za-z0-9]' constraints.txt | awk -v dir="$lock" -v parts="$PARTS" '{ print > (dir "/part" (NR % parts) ".txt") }'
install_part() {
    "$VENV/bin/python" -m pip install --quiet --no-deps -r "$lock/part$1.txt" 2>"$lock/part$1.err" \
        || echo "setup: the pins do not all install as they are here; pip resolves them instead ($(tail -1 "$lock/part$1.err"))"
}
pids=()
for part in $(seq 0 $((PARTS - 1))); do
    install_part "$part" &
    pids+=($!)
done
wait "${pids[@]}"
rm -rf "$lock"
"$VENV/bin/python" -m pip install --quiet -r requirements.txt -c constraints.txt
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e .

wait "$debian"
echo "setup: done ($("$VENV/bin/python" -c 'import torch, snakemake; print("torch", torch.__version__, "snakemake", snakemake.__version__)'))"
