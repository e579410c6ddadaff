#!/usr/bin/env bash
# Installs PoCL, an OpenCL runtime on the CPU, where LightGBM's OpenCL learner (device_type=gpu) then
# trains. Quick when it is there already; skipped (with a note) without apt-get or root.
set -euo pipefail
if [ -e /etc/OpenCL/vendors/pocl.icd ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "note: no apt-get or not root: PoCL not installed; the OpenCL tests will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends pocl-opencl-icd ocl-icd-libopencl1 >/dev/null
