"""What the GPU box runs, in priority order, and what each step needs installed first.

Shared by the kit (which places each step in the first call whose files complete its needs) and by the
on-box half (which runs a call's steps). Seconds are estimates for a 16-core box with an H100 or H200,
from the last GPU run's figures; the on-box half starts a step only when the call has that much left.
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
        100,
        "pytest -m gpu (the tests marked gpu), then its OpenCL tests with LightGBM's PyPI build",
    ),
    Step(
        "flagship",
        frozenset({BASE, LGB_CUDA, XGB}),
        170,
        "+hardware=1gpu model=gbm_gpu vs model=gbm on the CPUs, whole processes: Adult (3 repeats), "
        "synthetic "
        "1M x 50 and 4M x 50 (1 each, at most 200 rounds)",
    ),
    Step(
        "network",
        frozenset({BASE}),
        110,
        "the network loop's rows/s on CUDA: eager and compile=reduce-overhead",
    ),
    Step(
        "lightgbm",
        frozenset({BASE, LGB_CUDA, LGB_OPENCL}),
        60,
        "LightGBM's CUDA learner vs its OpenCL learner vs its CPU learner, synthetic 1M",
    ),
    Step("xgboost", frozenset({BASE, XGB}), 35, "XGBoost device=cuda vs CPU hist, synthetic 1M"),
    Step(
        "packing", frozenset({BASE}), 50, "two 0.5-GPU network fits packed on one GPU vs one after the other"
    ),
    Step("startup", frozenset({BASE, LGB_CUDA, XGB}), 20, "dry_run=true +hardware=4gpu model=all start-up"),
    Step(
        "tracked", frozenset({BASE, LGB_CUDA, XGB}), 60, "tracked vs untracked, +hardware=1gpu model=gbm_gpu"
    ),
)
BY_NAME = {s.name: s for s in STEPS}
CALL_LIMIT_S = 480  # no command longer than 8 minutes (the box's limit is 10)
SETUP_S = {1: 30}  # per call: taking in, reassembling and installing its files (the first installs the most)
SETUP_OTHER_S = 15
START_S = 90  # the machine's start, once, before the first call
GAP_S = 10  # between two calls (the machine stays warm 30 s)
SLACK = 1.25  # a call's own time limit: its estimate times this
PLAN_LIMIT_S = 12 * 60  # the plan's estimate, the start included, must fit here
BUDGET_S = 15 * 60  # the device time of one session: every call at its own limit must still fit
