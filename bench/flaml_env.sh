#!/usr/bin/env bash
# Creates bench/.venv-flaml: FLAML 2.7.0 with its AutoML extras (LightGBM, XGBoost, scikit-learn) in its
# own environment, so the project's environment is untouched. FLAML's AutoML does not need torch; none
# is installed here (a constraint keeps pip from pulling one in).
# Usage: bash bench/flaml_env.sh [PYTHON]   (PYTHON default python3)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${1:-python3}"
VENV=.venv-flaml
FLAML=2.7.0

"$PYTHON" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
no_torch=$(mktemp)
echo "torch<0" > "$no_torch"  # nothing satisfies it: pip fails rather than install torch
"$VENV/bin/python" -m pip install --quiet -c "$no_torch" "flaml[automl]==$FLAML" pyarrow
"$VENV/bin/python" -c "import flaml, lightgbm, xgboost, sklearn; print('flaml', flaml.__version__)"
