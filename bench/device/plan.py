"""What the GPU box runs, in priority order, and what each step needs installed first.

Shared by the kit (which places each step in the first call whose files complete its needs) and by the
on-box half (which runs a call's steps). Seconds are estimates for a 16-core box with an H100 or H200,
each step start to end, from the kit's run on an H200 (pytest 155 s, flagship's runs, lightgbm 68 s,
startup 23 s at 5 repeats, tracked 44 s; machine start ~30 s, call 1's files ~14 s, ~15 s between calls)
and, for the steps that never finished there, from their parts' rates; the on-box half starts a step
only when the call has that much left (or 30 s).
"""

from __future__ import annotations

from dataclasses import dataclass

# Packages a step can need, beyond the box's image: 'base' is the engine's own dependencies.
BASE, LGB_CUDA, LGB_OPENCL, XGB = "base", "lightgbm-cuda", "lightgbm-opencl", "xgboost"


@dataclass(frozen=True)
class Step:
    name: str
    needs: frozenset
    seconds: int  # estimated on the box, start to end
    what: str


STEPS = (
    Step(
        "pytest",
        frozenset({BASE, LGB_CUDA, LGB_OPENCL, XGB}),
        165,  # 155 measured; its half-GPU packing test, which failed at once there, will run
        "pytest -m gpu (the tests marked gpu), then its OpenCL tests with LightGBM's PyPI build",
    ),
    Step(
        "flagship",
        frozenset({BASE, LGB_CUDA, XGB}),
        # Adult 5 runs of ~6 s, 1M 16 + 20 s, 4M 44 s on the GPU and ~70 s on the CPUs (cut there at 19 s)
        185,
        "+hardware=1gpu model=gbm_gpu vs model=gbm on the CPUs, whole processes: Adult (2 repeats), "
        "synthetic 1M x 50 and 4M x 50 (1 each, at most 200 rounds)",
    ),
    Step(
        "network",
        frozenset({BASE}),
        # preparing 11 s; per precision the engine loop ~8 s (1.28M rows x 6 epochs at ~1M-1.3M rows/s) and
        # the DataLoader baseline ~13 s (750k rows at ~60k rows/s); compile=reduce-overhead ~25-50 s
        90,
        "the network loop's rows/s on CUDA: eager and compile=reduce-overhead",
    ),
    Step(
        "lightgbm",
        frozenset({BASE, LGB_CUDA, LGB_OPENCL}),
        70,
        "LightGBM's CUDA learner vs its OpenCL learner vs its CPU learner, synthetic 1M",
    ),
    # loading 1M rows ~5 s, a warm-up, 2 x (CPU hist ~4.8 s + CUDA ~1.5 s) (the H100 run's fits)
    Step("xgboost", frozenset({BASE, XGB}), 30, "XGBoost device=cuda vs CPU hist, synthetic 1M"),
    Step(
        "packing",
        frozenset({BASE}),
        # loading 1M rows, a warm-up, one after the other ~10 s and packed ~14 s (H100), the planner's dry run
        45,
        "two 0.5-GPU network fits packed on one GPU vs one after the other (1 repeat), the planner's choice",
    ),
    Step("startup", frozenset({BASE, LGB_CUDA, XGB}), 18, "dry_run=true +hardware=4gpu model=all start-up"),
    Step(
        "tracked", frozenset({BASE, LGB_CUDA, XGB}), 45, "tracked vs untracked, +hardware=1gpu model=gbm_gpu"
    ),
)
# Measured on demand (`python -m bench.device.kit --steps NAME,...`), not in the default plan: what bounds a
# figure the default plan has measured.
EXTRA_STEPS = (
    # preparing 2M rows ~11 s; 3 epochs of 1.6M rows at each of 4 batch sizes (~1.5M rows/s at 4096 on the
    # H200, fewer at 1024); the profile ~5 s
    Step("network-batches", frozenset({BASE}), 60,
         "the network loop's rows/s and time per step at batch sizes 1024-65536, kernels per step"),
    # loading 4M rows ~15 s, a warm-up and one fit on each learner (1M: 3.4 s CPU, 6.8 s CUDA on the H200)
    Step("lightgbm-largest", frozenset({BASE, LGB_CUDA}), 90,
         "LightGBM's CUDA learner vs its CPU learner at the flagship's largest size"),
)
BY_NAME = {s.name: s for s in STEPS + EXTRA_STEPS}
CALL_LIMIT_S = 540  # no command longer than 9 minutes (the box's limit is 10)
SETUP_S = {1: 15}  # per call: taking in, reassembling and installing its files (the first installs the most)
SETUP_OTHER_S = 5
START_S = 30  # the machine's start, once, before the first call
GAP_S = 15  # between two calls: the files brought back, the next command's files sent (warm for 30 s)
SLACK = 1.25  # a call's own time limit: its estimate times this
PLAN_LIMIT_S = 12 * 60  # the plan's estimate, the start included, must fit here
BUDGET_S = 15 * 60  # the device time of one session: every call at its own limit must still fit
