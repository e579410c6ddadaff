"""Run the benchmark suites of the pipeline engine and write their figures to one JSON file.

`python -m bench [--suite a,b] [--quick] [--out DIR]`. Suites: overhead, startup, parallel_folds, fixed_cost,
nn_loop, autogluon, gpu, async_sweep, scale, real_tables, role_inference, equal_budget (all by default, in
that order), and engine_ab (on request: the engine against itself, arms of overrides named by ENGINE_AB_ARMS).
`python -m bench.report` turns every JSON under bench/results/ into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITES = ("overhead", "startup", "parallel_folds", "fixed_cost", "nn_loop", "autogluon", "gpu", "async_sweep", "scale",
          "real_tables", "role_inference", "equal_budget")
ON_REQUEST = ("engine_ab",)  # run only when named: they need settings of their own


def parse(argv=None) -> argparse.Namespace:
    from bench.common import DEFAULT_BIO_TRAIN

    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Suites: " + ", ".join(SUITES + ON_REQUEST))
    p.add_argument("--suite", default="all", help="comma-separated suites to run (default: all)")
    p.add_argument("--quick", action="store_true", help="fewer repeats and smaller data, for development")
    p.add_argument("--repeats", type=int, default=None, help="repeats of every figure (default: per suite and mode)")
    p.add_argument("--out", type=Path, default=HERE / "results",
                   help="folder for the results JSON (default: bench/results)")
    p.add_argument("--bio-train", type=Path, default=DEFAULT_BIO_TRAIN,
                   help=f"bio_train.parquet (145,751 rows; default {DEFAULT_BIO_TRAIN})")
    p.add_argument("--autogluon-python", type=Path, default=HERE / ".venv-autogluon" / "bin" / "python",
                   help="python of the AutoGluon environment (made by bench/autogluon_env.sh)")
    p.add_argument("--keep-scratch", action="store_true", help="keep the run directories and logs of the engine")
    p.add_argument("--sizes", default=None,
                   help="scale suite: the table sizes to run, of 200k,2M,10M (default: all three; --quick: 20k,50k)")
    args = p.parse_args(argv)
    names = SUITES if args.suite == "all" else tuple(s.strip() for s in args.suite.split(",") if s.strip())
    unknown = [s for s in names if s not in SUITES + ON_REQUEST]
    if unknown:
        p.error(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(SUITES + ON_REQUEST)}")
    args.suites = names
    if args.sizes is not None:
        from bench.suites.scale import SIZES

        args.sizes = tuple(x.strip() for x in args.sizes.split(",") if x.strip())
        unknown = [x for x in args.sizes if x not in SIZES]
        if unknown or not args.sizes:
            p.error(f"unknown size(s) {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    from bench import common

    compile_engine()

    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    opts = common.Options(quick=args.quick, repeats=args.repeats, scratch=scratch, bio_train=args.bio_train,
                          autogluon_python=args.autogluon_python, sizes=args.sizes,
                          keep_scratch=args.keep_scratch)
    started = datetime.now(timezone.utc)
    device = common.cuda_device_name()
    result = {
        "schema": 1,
        "date": started.isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": common.machine(),
        "device": {"name": device or common.cpu_model(), "kind": "cuda" if device else "cpu"},
        "versions": common.versions(),
        "suites": {},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"{stamp}-{result['mode']}.json"
    common.log(f"suites {', '.join(args.suites)} ({result['mode']}); scratch {scratch}; results {path}")
    failed = False
    for name in args.suites:
        t0 = time.perf_counter()
        common.log(f"suite {name}")
        try:
            module = importlib.import_module(f"bench.suites.{name}")
            out = module.run(opts)
            out.setdefault("status", "ok")
        except Exception as exc:
            failed = True
            out = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc()[-4000:], "figures": []}
            common.log(f"suite {name} failed: {type(exc).__name__}: {exc}")
        out["seconds"] = round(time.perf_counter() - t0, 1)
        result["suites"][name] = out
        result["total_seconds"] = round(sum(s["seconds"] for s in result["suites"].values()), 1)
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")  # after each suite: partial results survive
        common.log(f"suite {name}: {out['status']} in {out['seconds']:.0f} s")
    if not args.keep_scratch:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    common.log(f"wrote {path} ({result['total_seconds']:.0f} s); render it with python -m bench.report")
    return 1 if failed else 0


def compile_engine() -> None:
    """Byte-compile the engine's modules, as an install does (`make install`, pip): whole-process figures
    measure the installed engine, not Python compiling a module it has no bytecode for yet (with
    PYTHONDONTWRITEBYTECODE set, every process would compile it again)."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("pipeline", "plugins"):
        compileall.compile_dir(root / package, quiet=1)


if __name__ == "__main__":
    sys.exit(main())
