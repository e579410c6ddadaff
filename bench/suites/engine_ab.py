"""The engine against itself: arms of CLI overrides on the equal_budget suite's tables at one time limit,
each table's arms run one after the other (so a busy spell of the machine falls on all of them), every arm
scored on the same test rows.

ENGINE_AB_ARMS names the arms (required): `NAME=override [override ...]`, arms separated by `;`, e.g.
ENGINE_AB_ARMS='B=model.lightgbm.params.early_stopping_round=300;C=hpo.pruning=false'. Arm A is the engine as
it stands: `python -m pipeline data.path=<table> time_limit_s=<L> tracking=none` (hpo=auto); each other
arm lays its overrides over A's. The tables, splits and limit are the equal_budget suite's:
EQUAL_BUDGET_TABLES, EQUAL_BUDGET_ONLY, EQUAL_BUDGET_SPLITS, and EQUAL_BUDGET_LIMITS (its first limit; 30 s
by default). Figures: `<table> · <arm> − A` in the metric's better direction, and for each arm the tables
where it scored higher, lower and the same as A, the geometric mean of its error over A's (the error being
1 − ROC AUC or accuracy, or the RMSE: under 1 where the arm is better), and the tables where it is at or
above both peers' scores in the latest committed equal_budget pass of the same table, split and limit.
Each run's folder is removed once it is scored (a 30-s run on a small table leaves 100 to 400 MB, most of
it the forests' trees), unless --keep-scratch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from bench.common import Options, figure, log, not_measured
from bench.suites.equal_budget import LOWER_IS_BETTER, METRIC, _engine, chosen_tables, data_overrides

RESULTS = Path(__file__).resolve().parents[1] / "results"
ARMS_HELP = ("write NAME=override [override ...] with NAME a word other than A, arms separated by ';', e.g. "
             "ENGINE_AB_ARMS='B=model.lightgbm.params.early_stopping_round=300;C=hpo.pruning=false'")


def parse_arms(text: str) -> dict[str, list[str]]:
    """`B=a=1 b=2;C=c=3` -> {"B": ["a=1", "b=2"], "C": ["c=3"]}; a malformed arm is a ValueError naming it."""
    arms: dict[str, list[str]] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, overrides = part.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier() or name == "A" or name in arms or not overrides.split():
            raise ValueError(f"ENGINE_AB_ARMS: {part!r} is not an arm: {ARMS_HELP}")
        arms[name] = overrides.split()
    if not arms:
        raise ValueError(f"ENGINE_AB_ARMS={text!r} names no arm: {ARMS_HELP}")
    return arms


def committed_peer_scores(folder: Path, limit: int) -> dict[str, tuple[float, float]]:
    """FLAML's and AutoGluon's test scores per table record at `limit`, from the latest equal_budget pass
    under `folder` that ran both on it."""
    scores: dict[str, tuple[float, float]] = {}
    for path in sorted(folder.glob("*-full.json")):  # file names start with the pass's UTC time
        suite = json.loads(path.read_text()).get("suites", {}).get("equal_budget") or {}
        for record, run in suite.get("settings", {}).get("runs", {}).items():
            sides = run.get(str(limit), {})
            peers = [sides.get(p, {}).get("score_test") for p in ("FLAML", "AutoGluon")]
            if all(isinstance(v, (int, float)) and math.isfinite(v) for v in peers):
                scores[record] = (float(peers[0]), float(peers[1]))
    return scores


def error(score: float, metric: str) -> float:
    """What the metric leaves to gain: the RMSE itself, or 1 − a score whose best is 1."""
    return score if metric in LOWER_IS_BETTER else 1.0 - score


def compare(scores: dict[str, dict[str, float]], metrics: dict[str, str], arm: str,
            peers: dict[str, tuple[float, float]]) -> dict:
    """Arm against A over the records both scored: counts higher/lower/same, the geometric mean of the error
    ratio, and the records at or above both committed peers for the arm and for A."""
    higher = lower = same = 0
    logs, above = [], {"A": 0, arm: 0}
    for record, by_arm in scores.items():
        a, b, metric = by_arm.get("A"), by_arm.get(arm), metrics[record]
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            continue
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        gap = sign * (b - a)
        higher, lower, same = higher + (gap > 0), lower + (gap < 0), same + (gap == 0)
        if error(a, metric) > 0 and error(b, metric) > 0:
            logs.append(math.log(error(b, metric) / error(a, metric)))
        if record in peers:
            for side, score in (("A", a), (arm, b)):
                above[side] += all(sign * (score - p) >= 0 for p in peers[record])
    return {"higher": higher, "lower": lower, "same": same,
            "error_ratio": math.exp(sum(logs) / len(logs)) if logs else float("nan"),
            "above_peers": above, "with_peers": sum(1 for r in scores if r in peers)}


def run(opts: Options) -> dict:
    arms = {"A": [], **parse_arms(os.environ.get("ENGINE_AB_ARMS", ""))}
    limit = int(os.environ.get("EQUAL_BUDGET_LIMITS", "30").split(",")[0])
    splits = int(os.environ.get("EQUAL_BUDGET_SPLITS", "1"))
    folder = opts.scratch / "engine_ab"
    scores: dict[str, dict[str, float]] = {}
    metrics: dict[str, str] = {}
    runs: dict[str, dict] = {}
    figures = []
    for name, (frame, label, task) in chosen_tables().items():
        home = folder / name.replace(" ", "_")
        home.mkdir(parents=True, exist_ok=True)
        csv = home / "table.csv"
        frame.to_csv(csv, index=False)
        metric = METRIC[task]
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        for split in range(splits):
            record = f"{name} (split {split})" if split else name
            metrics[record], runs[record], scores[record] = metric, {"task": task, "split": split}, {}
            base = data_overrides(csv, name, label, task, split) + [f"time_limit_s={limit}"]
            for arm, overrides in arms.items():
                log(f"engine_ab: {record} · {limit} s: arm {arm}")
                run_dir = home / f"{arm}{split}"
                result = _engine(base + overrides, run_dir, metric)
                if not opts.keep_scratch:
                    shutil.rmtree(run_dir, ignore_errors=True)
                runs[record][arm] = result
                scores[record][arm] = result["score"]
            for arm in arms:
                if arm == "A":
                    continue
                a, b = scores[record]["A"], scores[record][arm]
                if math.isfinite(a) and math.isfinite(b):
                    gap = sign * (b - a) + 0.0  # + 0.0: an equal RMSE is 0, not -0
                    figures.append(figure(f"{record} · {arm} − A", [gap], metric, group=record, kind="score"))
                else:
                    failed = [x for x in ("A", arm) if not math.isfinite(scores[record][x])]
                    figures.append(not_measured(f"{record} · {arm} − A", f"arm {' and '.join(failed)} failed",
                                                group=record))
    peers = committed_peer_scores(RESULTS, limit)
    summary = {}
    for arm in arms:
        if arm == "A":
            continue
        c = summary[arm] = compare(scores, metrics, arm, peers)
        for what, said in (("higher", "higher than"), ("lower", "lower than"), ("same", "the same as")):
            figures.append(figure(f"{arm}: tables {said} A", [c[what]], "tables", group="summary"))
        if math.isfinite(c["error_ratio"]):
            figures.append(figure(f"{arm}: error / A's error, geometric mean", [c["error_ratio"]], "x",
                                  group="summary"))
        for side in ("A", arm):  # A's count is over the tables this arm scored too: one figure per arm
            name = f"{arm} vs A: {side} at or above both peers' committed scores (of {c['with_peers']})"
            figures.append(figure(name, [c["above_peers"][side]], "tables", group="summary"))
    settings = {"limit_s": limit, "splits": splits, "arms": {a: " ".join(o) for a, o in arms.items()},
                "engine": "python -m pipeline data=csv data.path=<table> data.label=<label> "
                          "data.problem_type=<task> data.seed=<split> seed=0 tracking=none time_limit_s=<L> "
                          "<the arm's overrides>", "summary": summary, "runs": runs}
    notes = ["one run per arm, table and split on a 2-core machine: two runs of the same code differ as "
             "much on the smallest tables, so a count of a few tables either way is noise"]
    return {"settings": settings, "figures": figures, "notes": notes}
