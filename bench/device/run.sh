#!/usr/bin/env bash
# bench/device/run.sh CALL: the GPU box's half of the proof kit (docs/gpu_kit.md), one invocation per
# command, in the repository root the command runs in, with .device/cCALL carried.
#
# Takes this call's files into $KIT_STATE (default /tmp/gpukit, kept while the machine stays warm),
# reassembles and installs what is complete, unpacks the project at the kit's commit, then measures the
# steps the manifest gives this call, each within what is left of the call's limit (the manifest's
# limit_s, or $KIT_CALL_LIMIT_S),
# writing the results JSON (named by time, device and call) and the log under $OUT as it goes.
# Without a CUDA device every figure is written as not measured, with the reason.
set -uo pipefail

CALL=${1:?usage: bench/device/run.sh CALL}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
KIT=${KIT_DIR:-$REPO/.device}
STATE=${KIT_STATE:-/tmp/gpukit}
PY=${PYTHON:-python3}
OUT=${OUT:-$REPO/.device/out}
START=$(date +%s)
# Deadlines: the call's own limit (the manifest's limit_s: its estimate with slack, the last call 540 s),
# and the plan's, counted from call 1's start, so that the plan keeps to its device minutes whatever the
# estimates missed: a step that would start past it is written as not measured.
read -r LIMIT PLAN_S < <("$PY" -c 'import json, sys
m = json.load(open(sys.argv[1]))
print(next(c["limit_s"] for c in m["calls"] if c["call"] == int(sys.argv[2])), m.get("plan_command_s", 690))' \
    "$KIT/c$CALL/manifest.json" "$CALL" 2>/dev/null || echo "540 690")
LIMIT=${KIT_CALL_LIMIT_S:-$LIMIT}
mkdir -p "$STATE"
[ "$CALL" = 1 ] && echo "$START" > "$STATE/plan_start"
PLAN_START=$(cat "$STATE/plan_start" 2>/dev/null || echo "$START")
DEADLINE=$(( START + LIMIT - 5 ))
(( PLAN_START + PLAN_S < DEADLINE )) && DEADLINE=$(( PLAN_START + PLAN_S ))
mkdir -p "$OUT" "$STATE"
exec > >(tee -a "$OUT/c$CALL.log") 2>&1

echo "== kit call $CALL on $(hostname) at $(date -u +%FT%TZ); $(( DEADLINE - START )) s for it; state $STATE; out $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi -L
"$PY" "$REPO/bench/device/onbox.py" "$KIT/c$CALL" "$STATE" "$PY" || {
    echo "kit call $CALL: the files could not be taken in (see above)"; exit 2; }
if [ ! -d "$STATE/project" ]; then
    echo "kit call $CALL: no project in $STATE: the machine was not the one of call 1 (it went cold?);" \
         "run the calls again from call 1"
    exit 3
fi

export PYTHONPATH="$STATE/site:$STATE/project:$STATE/project/plugins"
export KIT_SITE_OPENCL="$STATE/site-opencl"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=
# LightGBM's CUDA build links libnccl.so.2 from the nvidia-nccl package of the image
NCCL=$("$PY" -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
[ -n "$NCCL" ] && export LD_LIBRARY_PATH="$NCCL/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Fallback: where the kit's CUDA build of LightGBM is missing or does not load here, build it from the
# sdist with the image's nvcc in the background of call 1 (setsid: it outlives the command); the next
# call installs it. Its log: $STATE/lightgbm-cuda-build.log.
if [ "$CALL" = 1 ] && command -v nvcc >/dev/null; then
    cuda_build=$("$PY" -c 'import json, sys; print(any("1cuda" in n for n in json.load(open(sys.argv[1]))))' \
        "$STATE/installed.json" 2>/dev/null)
    sdist=$(ls "$STATE"/files/lightgbm-*.tar.gz 2>/dev/null | head -1)
    if [ -n "$sdist" ] && [ -n "$NCCL" ] && { [ "$cuda_build" != True ] || ! "$PY" -c "import lightgbm"; }; then
        echo "LightGBM's CUDA build is missing or does not load: building $sdist in the background"
        rm -rf "$STATE"/site/lightgbm "$STATE"/site/lightgbm-*.dist-info
        mkdir -p "$STATE/nccl/lib" "$STATE/lightgbm-cuda-built"
        ln -sfn "$NCCL/include" "$STATE/nccl/include"
        ln -sf "$NCCL/lib/libnccl.so.2" "$STATE/nccl/lib/libnccl.so"
        CPATH="$NCCL/include" CMAKE_BUILD_PARALLEL_LEVEL=8 setsid nohup "$PY" -m pip wheel --no-deps \
            --no-build-isolation --no-index -w "$STATE/lightgbm-cuda-built" \
            --config-settings=cmake.define.USE_CUDA=ON --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
            --config-settings=cmake.define.BUILD_WITH_SHARED_NCCL=ON \
            --config-settings=cmake.define.NCCL_ROOT="$STATE/nccl" "$sdist" \
            > "$STATE/lightgbm-cuda-build.log" 2>&1 < /dev/null &
    fi
fi

# NVIDIA's OpenCL driver where the image has it but no ICD file registers it: LightGBM's PyPI build links
# its own ICD loader, which reads only the registered ones (on the H200 box of 2026-11-27 it saw PoCL's CPU
# alone, though the system's loader listed the H200). Registered for this call as the driver's package
# would (/etc/OpenCL/vendors/nvidia.icd), in a folder of the kit's beside the registered files; the
# results' box record shows OCL_ICD_VENDORS and what each loader lists.
ICDS=${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}
NV_OPENCL=$( { ldconfig -p 2>/dev/null | grep -o '/[^ ]*libnvidia-opencl\.so\.1$'; \
               ls /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1 2>/dev/null; } | head -1)
if [ -n "$NV_OPENCL" ] && ! grep -qs nvidia-opencl "$ICDS"/*.icd; then
    mkdir -p "$STATE/icd"
    cp "$ICDS"/*.icd "$STATE/icd/" 2>/dev/null
    echo "$NV_OPENCL" > "$STATE/icd/nvidia.icd"
    export OCL_ICD_VENDORS="$STATE/icd"
    echo "NVIDIA's OpenCL driver ($NV_OPENCL) is not registered in $ICDS: registered for this call (OCL_ICD_VENDORS=$OCL_ICD_VENDORS)"
fi

cd "$STATE/project" || exit 3
"$PY" -m compileall -q -x '/\.venv' pipeline plugins bench >/dev/null  # as an install does (bench/__main__.py)
"$PY" -m bench.device.calls --call "$CALL" --manifest "$STATE/manifest.json" --out-dir "$OUT" \
    --deadline "$DEADLINE" --scratch "$STATE/scratch/c$CALL"
code=$?
for f in "$STATE"/scratch/c"$CALL"/pytest/pytest-gpu*.log; do
    [ -f "$f" ] && cp "$f" "$OUT/c$CALL-$(basename "$f")"
done
echo "== kit call $CALL done in $(( $(date +%s) - START )) s (exit $code)"
exit $code
