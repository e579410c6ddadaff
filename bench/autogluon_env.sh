#!/usr/bin/env bash
# Creates bench/.venv-autogluon: AutoGluon 1.6.3 (LightGBM, XGBoost, NN_TORCH) in its own environment,
# since it pins pandas<2.4, ray<2.59 and torch<2.14, which the project's own environment does not.
#
# torch is pinned to 2.13.0 (AutoGluon 1.6.3 accepts torch>=2.10,<2.14): on a CPU-only machine that is
# the local CPU build; an unpinned torch would pull several GB of CUDA packages.
# Usage: bash bench/autogluon_env.sh [PYTHON]   (default python3; set AG_TORCH=none to skip NN_TORCH)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${1:-python3}"
VENV=.venv-autogluon
TORCH="${AG_TORCH:-2.13.0}"

"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
if [ "$TORCH" != "none" ]; then
  "$VENV/bin/python" -m pip install --quiet "torch==$TORCH"
fi
"$VENV/bin/python" -m pip install --quiet \
  "autogluon.tabular[lightgbm,xgboost]==1.6.3" \
  "ray>=2.55,<2.59" \
  pyarrow
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
for name in ("autogluon.tabular", "autogluon.core", "lightgbm", "xgboost-cpu", "torch", "ray", "pandas", "numpy"):
    try:
        print(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"{name} not installed")
PY
