"""Plots logged as artifacts: the task timeline (Gantt), learning curves, feature importance."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class RunPlots:
    """What a run's plots are drawn from: small and picklable, so the tracker's process draws them."""

    timeline: list[dict]  # the run's timeline entries (fits and predictions)
    histories: dict[str, dict[str, list[float]]]  # per model: each learning curve
    importances: dict[str, Optional[dict[str, float]]]  # per model: mean gain per feature


def draw(data: RunPlots, run_dir: Path) -> list[Path]:
    """The run's plots, drawn into run_dir: timeline, learning curves and feature importance (each
    that has something to show)."""
    paths = (
        timeline(data.timeline, run_dir / "timeline.png"),
        learning_curves(data.histories, run_dir / "learning_curves.png"),
        feature_importance(data.importances, run_dir / "feature_importance.png"),
    )
    return [p for p in paths if p is not None]


def preload() -> threading.Thread:
    """Import matplotlib's figure and Agg canvas in a thread: a tracked run's plots are drawn after
    the fit, and the import (most of their cost) can run while the fit does."""

    def load() -> None:
        try:
            import matplotlib.backends.backend_agg  # noqa: F401
            import matplotlib.figure  # noqa: F401
        except Exception:  # noqa: BLE001  (drawing the plots imports it again and reports what fails)
            pass

    thread = threading.Thread(target=load, name="matplotlib-preload", daemon=True)
    thread.start()
    return thread


def _figure(figsize):
    """A figure drawn by Agg without pyplot: no GUI backend, no global figure registry to import."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def _colors(n: int) -> list:
    from matplotlib import colormaps

    return [colormaps["tab10"](i % 10) for i in range(n)]


def timeline(entries: list[dict], path: Path) -> Optional[Path]:
    """One row per device slot (GPU ids, or the worker process for CPU fits); a bar per task."""
    if not entries:
        return None
    from matplotlib.patches import Rectangle

    t0 = min(e["start"] for e in entries)
    lanes: dict[str, int] = {}
    fig = _figure((10, 1.2 + 0.35 * len({_lane(e) for e in entries})))
    ax = fig.subplots()
    models = sorted({e["model"] for e in entries})
    colors = dict(zip(models, _colors(len(models))))
    for e in sorted(entries, key=lambda e: e["start"]):
        lane = lanes.setdefault(_lane(e), len(lanes))
        ax.barh(lane, e["end"] - e["start"], left=e["start"] - t0, color=colors[e["model"]],
                edgecolor="black", linewidth=0.4, alpha=0.5 if e.get("cached") else 0.9)
        ax.text(e["start"] - t0, lane, f" t{e['trial']}/f{e['fold']}", va="center", fontsize=7)
    ax.set_yticks(range(len(lanes)), list(lanes))
    ax.set_xlabel("seconds since the first fit started")
    ax.legend(handles=[Rectangle((0, 0), 1, 1, color=colors[m]) for m in models], labels=models,
              loc="upper right", fontsize=8)
    ax.set_title("Task timeline")
    fig.tight_layout()
    _save(fig, path)
    return path


def _lane(e: dict) -> str:
    if e["device_ids"]:
        shares = e.get("gpu_shares") or []
        share = f" x{shares[0]:g}" if shares and shares[0] < 1 else ""
        return "GPU " + ",".join(map(str, e["device_ids"])) + share + f" pid {e['pid']}"
    return f"CPU pid {e['pid']}"


def learning_curves(histories: dict[str, dict[str, list[float]]], path: Path) -> Optional[Path]:
    """Per model (and fold): each recorded curve against its epoch or boosting round."""
    curves = {k: h for k, h in histories.items() if h}
    if not curves:
        return None
    fig = _figure((4.5 * len(curves), 3.4))
    axes = fig.subplots(1, len(curves), squeeze=False)
    for ax, (name, history) in zip(axes[0], curves.items()):
        for metric, values in history.items():
            if metric.startswith(("train_loss", "val_loss", "valid_")):
                steps = [i for i, v in enumerate(values) if v == v]  # recorded every few rounds: NaN between
                ax.plot(steps, [values[i] for i in steps], label=metric)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("epoch / round")
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    return path


def feature_importance(importances: dict[str, dict[str, float]], path: Path, top: int = 20) -> Optional[Path]:
    shown = {k: v for k, v in importances.items() if v}
    if not shown:
        return None
    fig = _figure((5 * len(shown), 0.3 * top + 1.2))
    axes = fig.subplots(1, len(shown), squeeze=False)
    for ax, (name, values) in zip(axes[0], shown.items()):
        items = sorted(values.items(), key=lambda kv: kv[1])[-top:]
        ax.barh([k for k, _ in items], [v for _, v in items])
        ax.set_title(f"{name}: gain", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    return path


def _save(fig, path: Path) -> None:
    """Render in memory, then write atomically: a killed run never leaves half an image."""
    import io

    from pipeline.store import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", dpi=110)
    atomic_write_bytes(path, buffer.getvalue())
