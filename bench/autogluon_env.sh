#!/usr/bin/env bash
# Creates bench/.venv-autogluon: AutoGluon 1.6.3 with the models of its default presets (LightGBM,
# XGBoost, CatBoost, NN_TORCH, NeuralNetFastAI; the forests and kNN come with scikit-learn), as
# `pip install autogluon` has them, in its own environment, since it pins pandas<2.4, ray<2.59 and
# torch<2.14, which the project's own does not. Without CatBoost and fastai, AutoGluon skips those two
# models of its defaults and says so only in its log.
#
# torch is pinned (default 2.13.0): on a CPU-only machine that is the local CPU build, where an
# unpinned torch would pull several GB of CUDA packages. The pin is installed only if AutoGluon's own
# metadata accepts it; otherwise AutoGluon goes without NN_TORCH and NeuralNetFastAI and the benchmark
# says so.
# Usage: bash bench/autogluon_env.sh [PYTHON]   (PYTHON default python3; AG_TORCH=none skips torch)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${1:-python3}"
VENV=.venv-autogluon
AG=1.6.3
TORCH="${AG_TORCH:-2.13.0}"
EXTRAS=lightgbm,xgboost,catboost

"$PYTHON" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip

if [ "$TORCH" != "none" ]; then
  meta=$(mktemp -d)
  "$VENV/bin/python" -m pip download --quiet --no-deps "autogluon.tabular==$AG" -d "$meta"
  if "$VENV/bin/python" - "$meta" "$TORCH" <<'PY'
import glob, sys, zipfile
from pip._vendor.packaging.requirements import Requirement

folder, version = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(f"{folder}/*.whl")[0])
text = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
specs = []
for line in text.splitlines():
    if line.startswith("Requires-Dist:"):
        req = Requirement(line.split(":", 1)[1].strip())
        if req.name == "torch" and (req.marker is None or req.marker.evaluate({"extra": "tabm"})):
            specs.append(req.specifier)
ok = bool(specs) and all(s.contains(version, prereleases=True) for s in specs)
print(f"autogluon.tabular requires torch {', '.join(map(str, specs)) or '(not listed)'}: "
      f"{version} {'accepted' if ok else 'not accepted'}")
sys.exit(0 if ok else 1)
PY
  then
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH"
    EXTRAS="$EXTRAS,fastai"
  else
    echo "installing AutoGluon without torch: NN_TORCH and NeuralNetFastAI will be skipped" >&2
  fi
  rm -rf "$meta"
fi

"$VENV/bin/python" -m pip install --quiet \
  "autogluon.tabular[$EXTRAS]==$AG" \
  "ray>=2.55,<2.59" \
  pyarrow
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
for name in ("autogluon.tabular", "autogluon.core", "lightgbm", "xgboost-cpu", "catboost", "fastai", "torch", "ray",
             "pandas", "numpy"):
    try:
        print(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"{name} not installed")
PY
