#!/usr/bin/env bash
# Create .venv and install uavgnn with its test tools, cluster launchers and Stable-Baselines3 (the tests train
# with it); fast no-op when already done.
# CPU-only machines get the CPU build of torch (~750 MB); machines with an NVIDIA
# driver get the CUDA build from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
# The browser test of the comparison report needs Debian's chromium: installed here when we can
# (root with apt-get; UAVGNN_BROWSER=0 opts out), never from inside a test.
if [ "${UAVGNN_BROWSER:-1}" = 1 ] && ! command -v chromium >/dev/null \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
stamp=.venv/.uavgnn-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q "torch==2.13.0"
  else
    PIP_RETRIES=0 .venv/bin/python -m pip install -q --timeout 20 "torch==2.13.0" \
      --extra-index-url https://download.pytorch.org/whl/cpu
  fi
fi
.venv/bin/python -m pip install -q -e ".[test,cluster,sb3]"
echo "$want" > "$stamp"
