#!/usr/bin/env bash
# Wheels of what tandem-rlvr needs and the lent GPU machine's image lacks (it has torch, transformers,
# accelerate, pyarrow, pandas, scipy, rich, matplotlib; not TRL, datasets, math-verify or gguf), for its
# Python 3.12 on x86-64, downloaded here into .device-wheels/ (ignored by git; the device tool carries it:
# carry [".device-wheels"]). On the GPU machine, scripts/gpu_check.sh installs them with
#   python3 -m pip install --no-index --no-deps --target .device-site .device-wheels/*.whl
# and puts .device-site and src on PYTHONPATH. Versions are this machine's, the ones the tests ran with.
#   bash scripts/device_wheels.sh        (about 3 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device-wheels
ver() { python -c "import importlib.metadata as m; print(m.version('$1'))"; }
PKGS=()
for p in trl datasets dill multiprocess math-verify latex2sympy2_extended antlr4-python3-runtime gguf xxhash; do
  PKGS+=("$p==$(ver "$p")")
done
python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .device-wheels "${PKGS[@]}"
du -sh .device-wheels
