"""`python -m bench.device.collect PATH...`: the box's per-call results JSON into one run under
bench/results/, and the models/<kind>_costs.yaml points they give.

PATH: the files a kit call brought back, or folders holding them (`*-gpu-*-c<N>.json`). Calls of one kit
commit and one device become one file, `<first call's time>-full-gpu-<device>.json`, that `python -m
bench.report` renders beside the other runs. Then the calibration: each learner's seconds at the work of the
data set measured, in the model kinds' calibration files' terms (pipeline/models/<kind>_costs.yaml), printed
as YAML to paste (with --print-only, nothing is written).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL_FILE = re.compile(r"^(\d{8}T\d{6}Z)-gpu-(.+)-c(\d+)\.json$")
SYNTHETIC_1M_WORK = 1_000_000 * 0.8 * 0.8 * 20 * 200 / 1e9  # training rows x features x rounds / 1e9 = 2.56


def call_files(paths: list[Path]) -> list[Path]:
    out = []
    for p in paths:
        out += sorted(p.glob("*.json")) if p.is_dir() else [p]
    return [p for p in out if CALL_FILE.match(p.name)]


def merge(files: list[Path]) -> dict[str, dict]:
    """One run per (kit commit, device): suites' figures joined in call order."""
    runs: dict[str, dict] = {}
    for path in sorted(files, key=lambda p: int(CALL_FILE.match(p.name).group(3))):
        stamp, device, _ = CALL_FILE.match(path.name).groups()
        data = json.loads(path.read_text())
        key = f"{data.get('kit', {}).get('commit', '')}|{device}"
        run = runs.get(key)
        if run is None:
            run = runs[key] = {k: v for k, v in data.items() if k != "suites"}
            run.update(
                suites={},
                command="bash bench/device/run.sh 1..N (the GPU proof kit)",
                calls=[],
                _name=f"{stamp}-full-gpu-{device}.json",
            )
        run["calls"].append(path.name)
        for name, suite in data["suites"].items():
            into = run["suites"].setdefault(
                name, {"status": "ok", "settings": {"steps": {}}, "figures": [], "notes": [], "seconds": 0}
            )
            into["figures"] = _joined(into["figures"], suite["figures"])
            into["notes"] += suite.get("notes", [])
            into["seconds"] = round(into["seconds"] + suite.get("seconds", 0), 1)
            into["settings"]["steps"].update(suite.get("settings", {}).get("steps", {}))
        run["total_seconds"] = round(sum(s["seconds"] for s in run["suites"].values()), 1)
    return runs


def _joined(figures: list[dict], later: list[dict]) -> list[dict]:
    """Figures of one run's calls: a figure measured in a later call (a step run again) takes the place of
    the same figure not measured before; a figure measured twice keeps its first measure."""
    key = lambda f: (f.get("group"), f.get("name"))  # noqa: E731
    out = list(figures)
    at = {key(f): i for i, f in enumerate(out)}
    for f in later:
        i = at.get(key(f))
        if i is None:
            at[key(f)] = len(out)
            out.append(f)
        elif "median" in f and "median" not in out[i] or out[i].get("outcome") is None and "outcome" in f:
            out[i] = f
    return out


def _median(run: dict, group: str, name: str):
    for suite in run["suites"].values():
        for f in suite["figures"]:
            if f.get("group") == group and f.get("name") == name and "median" in f:
                return f["median"]
    return None


def calibration(run: dict) -> dict:
    """models/<kind>_costs.yaml entries of a merged run: learner -> {device, points[, threads, start_s]}; packing."""
    work = round(SYNTHETIC_1M_WORK, 3)
    cores = run.get("machine", {}).get("cpu_cores")
    picks = {
        "xgboost/hist": ("cpu", "XGBoost · synthetic 1M", "CPU hist seconds"),
        "xgboost/cuda": ("cuda", "XGBoost · synthetic 1M", "CUDA seconds"),
        "lightgbm/cpu": ("cpu", "LightGBM CUDA build · synthetic 1M", "CPU seconds"),
        "lightgbm/cuda": ("cuda", "LightGBM CUDA build · synthetic 1M", "CUDA seconds"),
        "lightgbm/opencl": ("cuda", "LightGBM · synthetic 1M", "OpenCL gpu seconds"),
    }
    learners = {}
    for key, (device, group, name) in picks.items():
        seconds = _median(run, group, name)
        if seconds is None:
            continue
        entry = {"device": device, "points": [[work, round(seconds, 3)]]}
        entry.update({"threads": cores} if device == "cpu" else {"start_s": 0.5})
        learners[key] = entry
    rows_per_s = _median(run, "network on CUDA · fp32", "engine loop rows/s")
    if rows_per_s:
        row_epochs = 1_280_000 * 5 / 1e6  # bench.suites.nn_loop on CUDA: 1.28M training rows, 5 timed epochs
        learners["network/cuda"] = {
            "device": "cuda",
            "points": [[row_epochs, round(row_epochs * 1e6 / rows_per_s, 3)]],
            "start_s": 0.5,
        }
    out = {"source": f"bench/results/{run['_name']}", "learners": learners}
    packed = _median(run, "two 0.5-GPU network fits", "speed-up (wall)")
    if packed is not None:
        out["packing"] = {"network": {"speed_up": round(packed, 2), "source": out["source"]}}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device.collect", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--print-only", action="store_true")
    args = p.parse_args(argv)
    files = call_files(args.paths)
    if not files:
        print(f"no kit results (*-gpu-*-c<N>.json) in {' '.join(map(str, args.paths))}", file=sys.stderr)
        return 1
    import yaml

    for run in merge(files).values():
        name = run.pop("_name")
        run["_name"] = name
        if not args.print_only:
            args.results.mkdir(parents=True, exist_ok=True)
            body = {k: v for k, v in run.items() if k != "_name"}
            (args.results / name).write_text(json.dumps(body, indent=1, default=str) + "\n")
            print(f"wrote {args.results / name} ({len(run['calls'])} calls)")
        print(f"# models/<kind>_costs.yaml from {name}: points at the work of synthetic 1M (x 20 features, 200 rounds)")
        print(yaml.safe_dump(calibration(run), sort_keys=False, default_flow_style=None), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
