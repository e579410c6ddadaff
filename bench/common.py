"""Shared pieces of the suites: the machine's description, figures (median/min/max of repeats),
and the engine run in-process as a user's code would call it."""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BIO_TRAIN = ROOT.parent / "shared" / "data" / "bio_train.parquet"  # beside the checkout
LIBRARIES = {
    "pipeline": "tabular-pipeline",
    "torch": "torch",
    "lightgbm": "lightgbm",
    "xgboost": "xgboost",
    "mlflow": "mlflow",
    "hydra-core": "hydra-core",
    "optuna": "optuna",
    "numpy": "numpy",
    "pandas": "pandas",
    "scipy": "scipy",  # Optuna's samplers, scikit-learn's transforms: a rebuilt venv moves the scores
    "scikit-learn": "scikit-learn",
}


# ---------------------------------------------------------------------------------------------- machine

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_cores() -> int:
    """CPUs this process may use (affinity-aware, as the engine counts them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def memory_gib() -> Optional[float]:
    """The machine's RAM, as the engine's planner reads it (pipeline.memory.budget.system_ram)."""
    from pipeline.memory.budget import system_ram

    try:
        return round(system_ram()[0] / 2**30, 1)
    except Exception:  # noqa: BLE001  (no /proc/meminfo and no psutil: the report says unknown)
        return None


def cuda_device_name() -> Optional[str]:
    """The first CUDA device's name, or None without one (imports torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def no_cuda_reason() -> str:
    return f"no CUDA device on this machine ({cpu_model()})"


def versions() -> dict[str, Optional[str]]:
    from importlib import metadata

    out: dict[str, Optional[str]] = {"python": platform.python_version()}
    for key, dist in LIBRARIES.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    return out


def machine() -> dict:
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": cpu_cores(),
        "cpu_count_os": os.cpu_count(),
        "memory_gib": memory_gib(),
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------------------------------------- figures

def figure(name: str, values: Iterable[float], unit: str, *, group: str = "",
           target: Optional[tuple[str, Any]] = None, **extra) -> dict:
    """One measured quantity: the raw repeats and their median, min and max."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError(f"figure {name!r} has no values")
    out = {
        "group": group, "name": name, "unit": unit, "median": statistics.median(v), "min": min(v), "max": max(v),
        "n": len(v), "values": v,
    }
    if target is not None:
        op, value = target
        out["target"] = {"op": op, "value": list(value) if op == "between" else value}
        out["meets_target"] = bool(meets(out["median"], op, value))
    out.update(extra)
    return out


def meets(median: float, op: str, value) -> bool:
    """Whether a median meets a target: `<=` or `>=` a value, or `between` (low, high), both included."""
    if op == "between":
        low, high = value
        return low <= median <= high
    return median <= value if op == "<=" else median >= value


def not_measured(name: str, reason: str, *, group: str = "", unit: str = "", **extra) -> dict:
    return {"group": group, "name": name, "unit": unit, "status": "not measured", "reason": reason, **extra}


def guarded(group: str, names: Iterable[str], fn: Callable[[], list[dict]]) -> list[dict]:
    """fn's figures; if it raises, each of `names` as not measured with the error, so the rest of a suite goes on."""
    try:
        return fn()
    except Exception as exc:  # one failed comparison must not lose a suite's other figures
        text = str(exc).strip().splitlines()
        reason = f"failed: {type(exc).__name__}: {text[0][:400] if text else ''}"
        log(f"{group}: {reason}")
        return [not_measured(name, reason, group=group) for name in names]


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Per-repeat ratios of paired measurements."""
    return [a / b for a, b in zip(numerators, denominators)]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Options:
    """What every suite is told: mode, repeats, where scratch files go, and data paths."""

    quick: bool
    repeats: Optional[int]
    scratch: Path
    bio_train: Path
    autogluon_python: Path
    sizes: Optional[tuple[str, ...]] = None  # the scale suite's table sizes (None: the mode's)
    keep_scratch: bool = False  # --keep-scratch: suites that remove their runs' folders as they go keep them

    def n(self, full: int, quick: int = 2) -> int:
        """Repeats for a figure: --repeats when given, else the mode's default."""
        if self.repeats is not None:
            return max(1, self.repeats)
        return quick if self.quick else full


# ---------------------------------------------------------------------------------------------- engine

def conf_dir() -> str:
    from pipeline.__main__ import CONFIG_DIR

    return CONFIG_DIR


def compose(overrides: list[str]):
    """The composed config, as `python -m pipeline OVERRIDES` would see it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import pipeline.config  # noqa: F401  (the schemas)

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            return hydra_compose("config", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def load_data(overrides: list[str], launch_dir: Path):
    """The engine's own load: typed frame, encoded labels, and its train/val/test split."""
    from pipeline.data import load
    from pipeline.settings import read_settings

    settings = read_settings(compose(overrides))
    return load(settings.conf.data, launch_dir), settings


@dataclass
class EngineRun:
    seconds: float
    leaderboard: Any  # pandas DataFrame
    run_dir: Path
    timeline: list


class Engine:
    """`pipeline.run.run(cfg, Runtime(...))` in this process, from already loaded data.

    The timer covers what `run` does after reading the data: settings, plan, fits (in the
    driver or in worker processes, as the plan decides), predictions, the ensemble, the
    leaderboard and the artifacts written to the run directory (plots included). Composing the
    config and loading the data happen before it; the terminal output goes to a log file.
    """

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.count = 0

    def run(self, overrides: list[str], data=None) -> EngineRun:
        import json

        import pandas as pd

        import pipeline.data
        from pipeline.run import Runtime, run

        cfg = compose(overrides)
        self.count += 1
        launch = self.scratch / "engine"
        run_dir = launch / "runs" / f"{self.count:04d}"
        runtime = Runtime(run_dir=run_dir, launch_dir=launch, overrides=tuple(overrides))
        patch = _preloaded(pipeline.data, data) if data is not None else contextlib.nullcontext()
        with open(self.scratch / "engine.log", "a") as out, contextlib.redirect_stdout(out), patch:
            print(f"== {' '.join(overrides)}", file=out)
            seconds, _ = timed(lambda: run(cfg, runtime))
        leaderboard = pd.read_csv(run_dir / "leaderboard.csv")
        timeline_path = run_dir / "timeline.json"
        timeline = json.loads(timeline_path.read_text()) if timeline_path.exists() else []
        return EngineRun(seconds, leaderboard, run_dir, timeline)

    def clean(self, result: EngineRun) -> None:
        import shutil

        shutil.rmtree(result.run_dir, ignore_errors=True)


@contextlib.contextmanager
def _preloaded(module, data):
    """The engine's data loader answers with the data already in memory."""
    original = module.load
    module.load = lambda *args, **kwargs: data
    try:
        yield
    finally:
        module.load = original


def fit_makespan(timeline: list) -> Optional[float]:
    """Seconds from the first fit's start to the last fit's end, from the engine's timeline."""
    if not timeline:
        return None
    return max(e["end"] for e in timeline) - min(e["start"] for e in timeline)


def leaderboard_scores(leaderboard, metric: str = "roc_auc") -> dict:
    """model -> {val, test} from the engine's leaderboard."""
    return {
        row["model"]: {"val": float(row[f"val_{metric}"]), "test": float(row[f"test_{metric}"])}
        for _, row in leaderboard.iterrows()
    }
