"""`python -m bench.report`: every results JSON under bench/results/ -> docs/benchmarks.md and docs/img/*.png.

Runs are grouped by machine (CPU model, cores, memory, device), the newest machine and run first.
The newest run of each machine gets tables and plots; earlier runs are folded away below it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
IMG_PREFIX = "bench-"
SUITES = {
    "overhead": (
        "Overhead: the engine vs plain library calls",
        "The engine (`python -m pipeline`'s `run`, in-process, `tracking=none`) against a plain script calling "
        "`lgb.train`, `xgb.train`, or a DataLoader torch loop, on the same loaded data, split, parameters and "
        "seed. **Engine timer**: `pipeline.run.run` from already loaded data to the leaderboard: settings, plan, "
        "the fit, validation and test predictions, ensemble/leaderboard, the run directory's artifacts (plan, "
        "result pickle, leaderboard CSV, three PNG plots). **Plain timer**: from the same loaded data to the test "
        "ROC AUC: datasets/matrices, training with early stopping on the validation split, test predictions at the "
        "best iteration, `roc_auc_score`. Hydra composition and data loading are outside both timers. "
        "Target: engine/plain ≤ 1.10×. The GBM test scores must be identical; the network's need not be "
        "(different shuffling streams).",
    ),
    "startup": (
        "Startup",
        "Wall seconds of fresh `python -m pipeline` subprocesses (interpreter start, imports, Hydra composition): "
        "`--help`, and a dry-run plan of every model on a declared 4-GPU box. Target: ≤ 1.5 s.",
    ),
    "parallel_folds": (
        "Parallel folds",
        "A k-fold LightGBM bag on Adult with one CPU per fit (k = cores and k = 2 × cores): `parallelism.sequential=true` "
        "(one fit at a time, in the driver) vs the default plan (as many fits as cores, in worker processes). "
        "Speed-up = sequential / parallel seconds; efficiency = speed-up / cores; the ideal is the core count.",
    ),
    "fixed_cost": (
        "Fixed cost of a run, whole processes",
        "Fresh processes timed start to exit, the variants of each comparison alternating within a repeat: "
        "`python -m bench.plain` (the engine's loader and split, `lgb.train` with the engine's parameters), "
        "`python -m pipeline model=lightgbm tracking=none`, and the same tracked (SQLite store that exists, "
        "models logged); `--help` and a dry run of every model on a declared 4-GPU box; `parallelism=bag5` as "
        "planned vs `parallelism.sequential=true`; a 16-job `hydra/launcher=gpu` sweep, as seconds per job "
        "beyond its own fit. Targets: tracked/untracked ≤ 1.3, untracked/plain ≤ 1.05, `--help` ≤ 0.8 s, "
        "dry run ≤ 1.2 s, bag parallel/one at a time ≤ 1.0, sweep ≤ 1.5 s per job. Scores must be identical.",
    ),
    "nn_loop": (
        "Network training loop",
        "Rows per second of training epochs: the engine's device-resident loop (`pipeline.nn.loop.Loop`: the "
        "table on the device, batches as index slices) vs a plain `TensorDataset` + `DataLoader` loop with the "
        "same `TabularMLP`, data, batch size and AdamW; fp32 and bf16-mixed autocast. Median over the epochs "
        "after a warm-up epoch; evaluation is excluded on both sides.",
    ),
    "autogluon": (
        "Against AutoGluon",
        "The engine (`model=all`: LightGBM, XGBoost and the network, k-fold bagged, weighted ensemble) against "
        "AutoGluon 1.6.3 in its own environment (`GBM`, `XGB`, `NN_TORCH` bagged with `num_bag_folds=k`, "
        "`num_stack_levels` as the engine's `stack_levels`, weighted ensemble, no time limit) on Adult with the "
        "engine's split: AutoGluon trains on the engine's train+validation rows, both are scored on the engine's "
        "test rows. Repeat r splits the rows with seed r (`data.seed=r seed=r`), the same rows for both sides, so "
        "the score figures are medians over different splits. "
        "Target: the engine at least 5× faster at equal or better test ROC AUC, with and without a stack level.",
    ),
    "gpu": (
        "GPU",
        "XGBoost `device=cuda` vs CPU `hist`, LightGBM OpenCL `gpu` vs CPU (fixed rounds, no early stopping), "
        "the network loops on the GPU (fp32, bf16-mixed), two 0.5-GPU network fits packed on one device vs one "
        "after the other, and `pytest -m gpu`. Each figure names its device.",
    ),
    "async_sweep": (
        "Sweeps that keep devices busy",
        "A 16-trial Optuna search over LightGBM's `num_leaves` (15 to 255, so the jobs take uneven times) with "
        "`hydra/launcher=gpu` on simulated GPUs, one job per device: `hydra.sweeper.schedule=batch` (Optuna asks "
        "`n_jobs` trials, each batch waits for its slowest job) vs `async` (a trial starts the moment a device "
        "frees), with TPE and with a seeded random sampler (the same trials in both schedules). Device idle "
        "fraction = 1 − the jobs' run time / (devices × the sweep's span). On a shared machine the load average "
        "of each run is in its settings.",
    ),
    "scale": (
        "Scale: the engine vs plain scripts at 200k, 2M and 10M rows",
        "Whole processes side by side on a Parquet file of N rows × 20 float32 features (scikit-learn's "
        "`make_classification`, seed 0): `python -m pipeline data=parquet … model=M tracking=none` with fixed "
        "rounds (300, early stopping as configured) or epochs (2, batches of 4,096 rows) against "
        "`python -m bench.plain_scale M` (pandas "
        "reads the file, the engine's split, `lgb.train` / `xgb.train` with the engine's parameters, threads, "
        "seed and early stopping, or the engine's network in a plain torch loop over the same standardized "
        "tensors). Wall seconds and peak resident memory of each process (wait4's `ru_maxrss`, measured from a "
        "small parent), engine and plain alternating within each repeat; the engine's memory estimate of its fit "
        "against the peak the fit measured (`memory.json`). Targets: engine / plain ≤ 1.02× wall and ≤ 1.05× peak "
        "RSS, memory estimate / peak between 0.85 and 1.15, for each model kind at every size.",
    ),
    "real_tables": (
        "Real tables: column roles",
        "Real public tables with the columns users' tables hold (ids, dates, free text, constants, leaks, a "
        "written row index), each trained three ways through the CLI: with column roles (the default), with "
        "every column as read (`data.infer_roles=false`), and with the offending columns dropped by hand. "
        "Figures: each model's test score with roles less the raw run's, and less the hand-dropped run's.",
    ),
    "role_inference": (
        "Column roles: their cost as the table grows",
        "Seconds to infer column roles at 100k, 1M and 10M rows: from a Parquet file's first rows before "
        "planning, and from a loaded table's sample. Neither reads more than a fixed sample, so both should "
        "stay flat.",
    ),
    "equal_budget": (
        "Equal budget: the engine, FLAML and AutoGluon",
        "The engine (`time_limit_s=L`, hpo=auto), FLAML (`AutoML.fit(time_budget=L)`) and AutoGluon "
        "(`TabularPredictor.fit(time_limit=L)`, default presets), each in its own environment, on the same "
        "train and test rows of real tables shipped by packages, scored on the same test rows; whole processes. "
        "Gaps in the metric's better direction (RMSE: peer minus engine); with `EQUAL_BUDGET_SPLITS=N` a figure's "
        "values are its N train/test splits. Targets: at or above each peer and the engine's own default run, "
        "wall within the limit plus 5 s, and at or above both peers on 3 tables of 4. Each side's scores and "
        "leaderboards are in the JSON (`settings.runs`).",
    ),
    "engine_ab": (
        "The engine against itself",
        "Arms of CLI overrides (`ENGINE_AB_ARMS`) against the engine as it stands (arm A), at one time "
        "limit on the equal_budget suite's tables, each table's arms run one after the other and scored on "
        "the same test rows. Per table the arm's gap to A in the metric's better direction; per arm the "
        "tables higher, lower and the same, the geometric mean of its error over A's (under 1: better), "
        "and the tables where each side is at or above both peers' scores in the latest committed "
        "equal_budget pass.",
    ),
}
HIDDEN_SETTINGS = {"leaderboards", "tail", "traceback", "runs"}


# ---------------------------------------------------------------------------------------------- loading

def load_runs(folder: Path) -> list[dict]:
    runs = []
    for path in sorted(folder.glob("*.json")):
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"skipping {path}: {exc}", file=sys.stderr)
            continue
        if not isinstance(run, dict) or "suites" not in run:
            continue
        run["_file"] = path.name
        run["_id"] = path.stem
        runs.append(run)
    return runs


def machine_key(run: dict) -> str:
    m, d = run.get("machine", {}), run.get("device", {})
    text = f"{m.get('cpu_model', '?')}, {m.get('cpu_cores', '?')} cores, {m.get('memory_gib', '?')} GiB"
    if d.get("kind") == "cuda":
        text += f", {d.get('name')}"
    return text


def by_machine(runs: list[dict]) -> list[tuple[str, list[dict]]]:
    """[(machine, its runs newest first)], the machine with the newest run first."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        groups[machine_key(run)].append(run)
    out = [(k, sorted(v, key=lambda r: r.get("date", ""), reverse=True)) for k, v in groups.items()]
    out.sort(key=lambda kv: kv[1][0].get("date", ""), reverse=True)
    return out


# ---------------------------------------------------------------------------------------------- formatting

def fmt(value, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "s":
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    if unit in ("x", "ratio"):
        return f"{value:.2f}×"
    if unit == "rows/s":
        return f"{value:,.0f}"
    if unit == "roc_auc":
        return f"{value:.4f}"
    if unit == "fraction":
        return f"{value:.0%}"
    if unit == "MiB":
        return f"{value:,.0f} MiB"
    return f"{value:.4g}"


def verdict(f: dict) -> str:
    if f.get("status") == "not measured":
        return ""
    if "target" in f:
        t = f["target"]
        mark = "met" if f.get("meets_target") else "**missed**"
        if t["op"] == "between":
            goal = f"between {fmt(t['value'][0], f['unit'])} and {fmt(t['value'][1], f['unit'])}"
        else:
            op = {"<=": "≤", ">=": "≥"}.get(t["op"], t["op"])
            goal = f"{op} {fmt(t['value'], f['unit'])}"
        text = f"{fmt(f['median'], f['unit'])} vs target {goal}: {mark}"
        return text + (f" ({f['note']})" if f.get("note") else "")
    if "ideal" in f and f.get("median") is not None:
        return f"{f['median'] / f['ideal']:.0%} of the ideal {fmt(f['ideal'], f['unit'])}"
    if f.get("identical") is not None:
        other = f.get("compared_with", "the other side")
        return f"identical to {other}" if f["identical"] else f"**differs** from {other}"
    return ""


def figure_table(figures: list[dict]) -> list[str]:
    lines = ["| group | figure | median | min | max | n | vs target |", "|---|---|---:|---:|---:|---:|---|"]
    for f in figures:
        name = f["name"] + (f" ({f['model']})" if f.get("model") else "")
        name += f" [{f['device']}]" if f.get("device") else ""
        if f.get("status") == "not measured":
            lines.append(f"| {f.get('group', '')} | {name} | not measured | | | | {f['reason']} |")
        elif f.get("kind") == "result":
            lines.append(f"| {f.get('group', '')} | {name} | {f.get('outcome')} | | | | {f.get('summary', '')} |")
        else:
            u = f["unit"]
            lines.append(f"| {f.get('group', '')} | {name} | {fmt(f['median'], u)} | {fmt(f['min'], u)} | "
                         f"{fmt(f['max'], u)} | {f['n']} | {verdict(f)} |")
    return lines


# The suites that set the engine beside a plain script: (first header, [(header, figure, unit)], last header,
# the word for scores that are not identical).
SIDE_BY_SIDE = {
    "overhead": ("data · model", [("engine", "engine seconds", "s"), ("plain", "plain seconds", "s"),
                                  ("engine/plain", "time ratio engine/plain", "ratio"),
                                  ("engine test AUC", "engine test ROC AUC", "roc_auc"),
                                  ("plain test AUC", "plain test ROC AUC", "roc_auc")], "scores", "differ"),
    "scale": ("model · rows", [("engine", "engine seconds", "s"), ("plain", "plain seconds", "s"),
                               ("wall", "engine / plain wall", "ratio"), ("engine peak", "engine peak RSS", "MiB"),
                               ("plain peak", "plain peak RSS", "MiB"),
                               ("peak RSS", "engine / plain peak RSS", "ratio"),
                               ("estimate / peak", "memory estimate / peak", "ratio")], "test AUC", "differs"),
}


def _summary(suite: str, figures: list[dict]) -> list[str]:
    """A side-by-side table for the suites that compare two things."""
    by = {(f.get("group"), f["name"]): f for f in figures if f.get("median") is not None}

    def cell(group, name, unit):
        f = by.get((group, name))
        return fmt(f["median"], unit) if f else "not measured"

    groups = list(dict.fromkeys(f.get("group") for f in figures))
    if suite in SIDE_BY_SIDE:
        first, columns, last, differ = SIDE_BY_SIDE[suite]
        lines = ["Medians side by side:", "", "| " + " | ".join([first, *(c[0] for c in columns), last]) + " |",
                 "|---|" + "---:|" * len(columns) + "---|"]
        for g in groups:
            same = by.get((g, "plain test ROC AUC"), {}).get("identical")
            verdict = "identical" if same else differ if same is False else "not compared"
            lines.append("| " + " | ".join([str(g), *(cell(g, name, unit) for _, name, unit in columns), verdict])
                         + " |")
        return lines + ["", "All figures:", ""]
    if suite == "autogluon" and by:
        lines = ["Medians side by side:", "", "| pairing | | seconds | best single model: test AUC | "
                 "ensemble: test AUC |", "|---|---|---:|---:|---:|"]
        for g in groups:
            best = {side: by.get((g, f"{side} best model test ROC AUC"), {}).get("model", "?")
                    for side in ("engine", "AutoGluon")}
            for side in ("engine", "AutoGluon"):
                lines.append(f"| {g} | {side} | {cell(g, f'{side} seconds', 's')} | "
                             f"{cell(g, f'{side} best model test ROC AUC', 'roc_auc')} ({best[side]}) | "
                             f"{cell(g, f'{side} ensemble test ROC AUC', 'roc_auc')} |")
        return lines + ["", "All figures:", ""]
    return []


def settings_lines(settings: dict, depth: int = 0) -> list[str]:
    out = []
    pad = "  " * depth
    for key, value in settings.items():
        if key in HIDDEN_SETTINGS:
            continue
        if isinstance(value, dict) and value and depth < 2:
            out.append(f"{pad}- {key}:")
            out += settings_lines(value, depth + 1)
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            out.append(f"{pad}- {key}: {text}")
    return out


def run_label(run: dict) -> str:
    mode = run.get("mode", "?")
    label = f"{run.get('date', '?')} · {mode}"
    return label + (" (development run: fewer repeats, smaller data)" if mode == "quick" else "")


# ---------------------------------------------------------------------------------------------- plots

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _measured(figures, predicate):
    return [f for f in figures if f.get("median") is not None and f.get("status") != "not measured" and predicate(f)]


def _barh(ax, labels, figs, color="#4c72b0"):
    med = [f["median"] for f in figs]
    lo = [f["median"] - f["min"] for f in figs]
    hi = [f["max"] - f["median"] for f in figs]
    y = range(len(figs))
    ax.barh(list(y), med, xerr=[lo, hi], color=color, capsize=3)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()


def plot_suite(suite: str, out: dict, title: str, path: Path) -> bool:
    """One PNG for a suite's run; False when it has nothing measured to draw."""
    figures = out.get("figures", [])
    plt = _pyplot()
    if suite == "autogluon":
        secs = _measured(figures, lambda f: f["unit"] == "s")
        aucs = _measured(figures, lambda f: f["unit"] == "roc_auc")
        speed = _measured(figures, lambda f: "target" in f)
        if not secs:
            return False
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 2.8))
        many = len({f.get("group") for f in secs}) > 1

        def label(f, unit_text):
            name = f["name"].replace(unit_text, "")
            return f"{name} · {f['group'].split(' · ', 2)[-1]}" if many and "stack" in f.get("group", "") else name

        _barh(ax1, [label(f, " seconds") for f in secs], secs)
        for bar, f in zip(ax1.patches, secs):
            bar.set_color("#4c72b0" if f["name"].startswith("engine") else "#dd8452")
        ax1.set_xlabel("seconds (median, min-max)")
        if speed:
            target = speed[0]["target"]["value"]
            ax1.set_title("AutoGluon / engine: " + ", ".join(f"{f['median']:.2f}×" for f in speed)
                          + f" (target ≥ {target:g}×)", fontsize=9)
        _barh(ax2, [label(f, " test ROC AUC") for f in aucs], aucs)
        for bar, f in zip(ax2.patches, aucs):
            bar.set_color("#4c72b0" if f["name"].startswith("engine") else "#dd8452")
        lo = min(f["min"] for f in aucs)
        ax2.set_xlim(max(0.0, lo - 0.02), min(1.0, max(f["max"] for f in aucs) + 0.005))
        ax2.set_xlabel("test ROC AUC")
    elif suite in ("overhead", "startup"):
        unit = {"overhead": "ratio", "startup": "s"}[suite]
        figs = _measured(figures, lambda f: f["unit"] == unit and "target" in f)
        if not figs:
            return False
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(figs) + 1.6))
        _barh(ax, [f["group"] if suite != "startup" else f["name"].replace("python -m pipeline ", "")
                   for f in figs], figs)
        target = figs[0]["target"]["value"]
        op = {"<=": "≤", ">=": "≥"}.get(figs[0]["target"]["op"], figs[0]["target"]["op"])
        ax.axvline(target, color="#c44e52", linestyle="--", label=f"target {op} {target:g}")
        ax.set_xlabel({"ratio": "engine seconds / plain seconds (median, min-max)",
                       "s": "seconds (median, min-max)"}[unit])
        ax.legend(loc="lower right")
    elif suite == "scale":
        names = ("engine / plain wall", "engine / plain peak RSS", "memory estimate / peak")
        panels = [(name, _measured(figures, lambda f, name=name: f["name"] == name)) for name in names]
        panels = [(name, figs) for name, figs in panels if figs]
        if not panels:
            return False
        height = max(len(figs) for _, figs in panels)
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.4 * height + 1.8), sharey=True)
        axes = [axes] if len(panels) == 1 else list(axes)
        for ax, (name, figs) in zip(axes, panels):
            _barh(ax, [f["group"] for f in figs], figs)
            target = figs[0]["target"]
            for value in (target["value"] if target["op"] == "between" else [target["value"]]):
                ax.axvline(value, color="#c44e52", linestyle="--")
            ax.axvline(1.0, color="grey", linestyle=":")
            ax.set_xlabel(f"{name} (median, min-max)")
    elif suite == "parallel_folds":
        figs = _measured(figures, lambda f: f["unit"] == "x")
        if not figs:
            return False
        ideal = figs[0].get("ideal", 1.0)
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(figs) + 1.4))
        _barh(ax, [f"{f['group'].split(' · ')[-1]} · {f['name']}" for f in figs], figs)
        ax.axvline(ideal, color="#55a868", linestyle="--", label=f"ideal {ideal:g}×")
        ax.axvline(1.0, color="grey", linestyle=":", label="sequential (1×)")
        ax.set_xlabel("speed-up over one fit at a time (median, min-max)")
        ax.legend(loc="lower right")
    elif suite in ("nn_loop", "gpu"):
        rows = _measured(figures, lambda f: f["unit"] == "rows/s")
        speed = _measured(figures, lambda f: f["unit"] == "x" and "rows/s" not in f["name"])
        panels = [p for p in (rows, speed) if p]
        if not panels:
            return False
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, sum(0.45 * len(p) + 1.4 for p in panels)))
        axes = [axes] if len(panels) == 1 else list(axes)
        for ax, figs in zip(axes, panels):
            colors = ["#dd8452" if f["name"].startswith("DataLoader") else "#4c72b0" for f in figs]
            _barh(ax, [f"{f['group']} · {f['name']}" for f in figs], figs)
            for bar, c in zip(ax.patches, colors):
                bar.set_color(c)
            if figs[0]["unit"] == "rows/s":
                ax.set_xlabel("rows per second (median over epochs, min-max)")
            else:
                ax.axvline(1.0, color="grey", linestyle=":")
                ax.set_xlabel("speed-up (median, min-max)")
    else:
        return False
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------- document

def render(runs: list[dict], img_dir: Path, doc_path: Path, results_dir: Path) -> tuple[str, set[Path]]:
    written: set[Path] = set()
    machines = by_machine(runs)
    rel_img = Path(_relpath(img_dir, doc_path.parent))
    lines = [
        f"<!-- Generated by `python -m bench.report` from {_relpath(results_dir, ROOT)}/*.json. Do not edit by "
        "hand: re-run the command. -->",
        "# Benchmarks",
        "",
        f"Generated by `python -m bench.report` from {len(runs)} result file(s) under "
        f"`{_relpath(results_dir, ROOT)}/`. Every figure is measured with repeats and reported as the median "
        "with min, max and the number of repeats n; the raw values are in the JSON files. Benchmarks are not "
        "tests: nothing here fails a build. A figure that could not be measured says so, with the reason; "
        "none is estimated.",
        "",
    ]
    if not runs:
        lines += ["No results yet: run `python -m bench` (see *How to reproduce* below).", ""]
    else:
        lines += ["## Runs", "", "Newest machine first, newest run first.", "",
                  "| date | mode | machine | device | suites | seconds | file |", "|---|---|---|---|---|---:|---|"]
        for key, mruns in machines:
            for run in mruns:
                dev = run.get("device", {})
                lines.append(
                    f"| {run.get('date', '?')} | {run.get('mode', '?')} | {key} | {dev.get('name', '?')} "
                    f"({dev.get('kind', '?')}) | {', '.join(run['suites'])} | {run.get('total_seconds', '')} | "
                    f"`{run['_file']}` |"
                )
        lines += [""] + _versions(machines) + [""] + _targets(machines) + [""]
    for suite, (title, about) in SUITES.items():
        lines += [f"## {title}", "", about, ""]
        any_run = False
        for key, mruns in machines:
            with_suite = [r for r in mruns if suite in r["suites"]]
            if not with_suite:
                continue
            any_run = True
            newest, older = with_suite[0], with_suite[1:]
            lines += [f"### {key}", "", f"Run {run_label(newest)}, device {newest.get('device', {}).get('name', '?')}.",
                      ""]
            lines += _suite_body(suite, newest, title, img_dir, rel_img, written)
            if older:
                lines += ["<details><summary>Earlier runs on this machine</summary>", ""]
                for run in older:
                    lines += [f"#### {run_label(run)}", ""] + _suite_body(suite, run, title, None, None, written)
                lines += ["</details>", ""]
        if not any_run:
            lines += ["No run has measured this suite yet.", ""]
    lines += _not_measured(machines) + _reproduce()
    return "\n".join(lines).rstrip() + "\n", written


def _suite_body(suite: str, run: dict, title: str, img_dir, rel_img, written: set) -> list[str]:
    out = run["suites"][suite]
    lines = []
    status = out.get("status", "ok")
    if status == "failed":
        return [f"The suite failed: `{out.get('error', '?')}`", ""]
    if status == "not measured" and out.get("reason"):
        lines += [f"Not measured: {out['reason']}.", ""]
    lines += _summary(suite, out.get("figures", []))
    lines += figure_table(out.get("figures", [])) + [""]
    if img_dir is not None:
        name = f"{IMG_PREFIX}{suite}-{run['_id']}.png"
        if plot_suite(suite, out, f"{title} ({run.get('device', {}).get('name', '')}, {run.get('mode')})",
                      img_dir / name):
            written.add(img_dir / name)
            lines += [f"![{title}]({(rel_img / name).as_posix()})", ""]
    for note in out.get("notes", []):
        lines.append(f"- {note}")
    if out.get("notes"):
        lines.append("")
    settings = settings_lines(out.get("settings", {}))
    if settings:
        lines += ["<details><summary>Settings of this run</summary>", ""] + settings + ["", "</details>", ""]
    for profile in out.get("profiles") or ([out["profile"]] if out.get("profile") else []):
        lines += profile_lines(profile)
    lines.append(f"Suite time: {out.get('seconds', '?')} s.")
    lines.append("")
    return lines


def profile_lines(profile: Optional[dict], top: int = 25) -> list[str]:
    """A profiled run's processes (bench/profile_hook): CPU and wall seconds, then the functions with the
    most cumulative time in each, in a collapsed block."""
    if not profile:
        return []
    if profile.get("status") == "failed":
        return [f"Profiled run: failed ({profile.get('reason', '?')}).", ""]
    lines = ["<details><summary>Where one profiled run spent its time (cProfile, main thread of each "
             "process; slower than unprofiled)</summary>", "", f"`{profile['command']}`: "
             f"{profile['wall_s_under_profiler']:.2f} s under the profiler.", ""]
    for p in profile["processes"]:
        if p["cpu_user_s"] + p["cpu_system_s"] < 0.1:  # multiprocessing's resource tracker and the like
            continue
        role = "the tracker's process" if p.get("mlflow_imported") else "the run's process"
        lines += [f"- pid {p['pid']} ({role}): {p['cpu_user_s'] + p['cpu_system_s']:.2f} s CPU over "
                  f"{p['wall_s']:.2f} s", ""]
        lines += ["  | cumulative s | calls | function |", "  |---:|---:|---|"]
        lines += [f"  | {r['cumulative_s']:.3f} | {r['calls']} | `{r['function']}` |" for r in p["top"][:top]]
        lines.append("")
    return lines + ["</details>", ""]


def newest_per_suite(mruns: list[dict]) -> list[tuple[str, dict]]:
    """(suite, the newest of these runs that has it), in the suites' order."""
    out = []
    for suite in SUITES:
        run = next((r for r in mruns if suite in r["suites"]), None)
        if run is not None:
            out.append((suite, run))
    return out


def _versions(machines) -> list[str]:
    lines = ["Library versions of each machine's newest run:", ""]
    names = []
    for _, mruns in machines:
        for k in mruns[0].get("versions", {}):
            if k not in names:
                names.append(k)
    lines.append("| machine | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for key, mruns in machines:
        v = mruns[0].get("versions", {})
        lines.append(f"| {key} | " + " | ".join(str(v.get(n) or "–") for n in names) + " |")
    return lines


def newest_groups(mruns: list[dict], suite: str) -> list[tuple[dict, dict]]:
    """(run, figure) for each group of figures of `suite`, from the newest of these runs that measured
    the group: a suite run in parts (the scale suite's 10M rows on their own) shows every part."""
    out, seen = [], set()
    for run in mruns:
        groups = set()
        for f in run["suites"].get(suite, {}).get("figures", []):
            group = f.get("group", "")
            if group not in seen:
                groups.add(group)
                out.append((run, f))
        seen |= groups
    return out


def full_if_any(mruns: list[dict], suite: str) -> list[dict]:
    """The full-mode runs of `suite` when there is one: a --quick run (fewer repeats, smaller data, for
    checking the plumbing) speaks for a target only where no full run measured the suite."""
    full = [r for r in mruns if r.get("mode") == "full" and suite in r["suites"]]
    return full or mruns


def _targets(machines) -> list[str]:
    rows = []
    for key, mruns in machines:
        for suite in SUITES:
            for run, f in newest_groups(full_if_any(mruns, suite), suite):
                if "target" in f and f.get("median") is not None:
                    rows.append(f"| {key} | {run.get('mode')} | {suite} | {f.get('group', '')} · {f['name']} | "
                                f"{verdict(f)} | `{run['_file']}` |")
    if not rows:
        return []
    return ["## Targets at a glance", "", "Each figure from the newest run on each machine that measured it.", "",
            "| machine | mode | suite | figure | median vs target | file |", "|---|---|---|---|---|---|"] + rows


def _not_measured(machines) -> list[str]:
    # reason -> suite -> figures
    reasons: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    totals: dict[str, int] = {}
    for key, mruns in machines:
        for suite, run in newest_per_suite(mruns):
            out = run["suites"][suite]
            totals[suite] = len(out.get("figures", []))
            if out.get("status") == "failed":
                reasons[f"the suite failed on {key}: {out.get('error')}"][suite].append("every figure")
                continue
            for f in out.get("figures", []):
                if f.get("status") == "not measured":
                    reasons[f["reason"]][suite].append(f.get("group") or f["name"])
    lines = ["## What was not measured, and why", ""]
    if not machines:
        return lines + ["Nothing yet: no results file exists.", ""]
    if not reasons:
        return lines + ["Every figure of the newest runs was measured.", ""]
    lines += ["From the newest run of each suite on each machine:", ""]
    for reason, suites in reasons.items():
        parts = []
        for suite, figs in suites.items():
            if len(figs) == totals.get(suite) or figs == ["every figure"]:
                parts.append(f"the whole `{suite}` suite ({totals.get(suite, '?')} figures)")
            else:
                parts.append(f"`{suite}`: {len(figs)} figures of " + ", ".join(dict.fromkeys(figs)))
        lines.append(f"- {'; '.join(parts)}: {reason}.")
    return lines + [""]


def _reproduce() -> list[str]:
    return [
        "## How to reproduce",
        "",
        "On a quiet machine (other work on it skews every timing):",
        "",
        "```bash",
        "make install                  # the project's environment in .venv",
        "bash bench/autogluon_env.sh   # AutoGluon 1.6.3: the autogluon and equal_budget suites",
        "make bench                    # = .venv/bin/python -m bench: every suite, full mode -> bench/results/",
        "make docs                     # = .venv/bin/python -m bench.report: this page and docs/img/",
        "```",
        "",
        "A development run: `make bench ARGS='--quick --suite overhead,startup --out /tmp/bench'`.",
        "",
        "Options of `python -m bench` (also `make bench ARGS='...'`):",
        "",
        "- `--suite overhead,startup,parallel_folds,fixed_cost,nn_loop,autogluon,gpu,async_sweep,scale`: a selection "
        "of suites",
        "- `--quick`: fewer repeats and smaller data, for development (its results are marked as such)",
        "- `--repeats N`: the same number of repeats for every figure",
        "- `--sizes 200k,2M`: the scale suite's table sizes (default 200k, 2M and 10M; `--quick`: 20k and 50k)",
        "- `--bio-train PATH`: bio_train.parquet (default `/work/shared/data/bio_train.parquet`)",
        "- `--out DIR`: where the JSON goes (default `bench/results/`); `python -m bench.report --results DIR` "
        "renders another folder",
        "- `--autogluon-python PATH`: the AutoGluon environment's python (default `bench/.venv-autogluon/bin/python`)",
        "",
        "The `gpu` suite measures only where `torch.cuda.is_available()`; elsewhere it writes every figure as not "
        "measured.",
        "",
    ]


def _relpath(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path.resolve(), start.resolve())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results", help="folder of results JSON")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md", help="the Markdown file to write")
    p.add_argument("--img", type=Path, default=None, help="folder for the plots (default: img/ beside --out)")
    args = p.parse_args(argv)
    img_dir = args.img or args.out.parent / "img"
    runs = load_runs(args.results)
    text, written = render(runs, img_dir, args.out, args.results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    for stale in img_dir.glob(f"{IMG_PREFIX}*.png") if img_dir.exists() else ():
        if stale not in written:
            stale.unlink()
    print(f"wrote {args.out} from {len(runs)} run(s), {len(written)} plot(s) in {img_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
