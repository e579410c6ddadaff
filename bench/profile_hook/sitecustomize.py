"""Loaded by every Python process of one profiled run: the fixed_cost suite puts this folder on
PYTHONPATH and names an output folder in PIPELINE_BENCH_PROFILE. Each process profiles its main
thread and, as it exits (normally or through os._exit), writes its CPU and wall seconds and the
functions with the most cumulative time to <folder>/<pid>.json."""

import os

_OUT = os.environ.get("PIPELINE_BENCH_PROFILE")
if _OUT:
    import atexit
    import cProfile
    import json
    import sys
    import time

    _START = time.time()
    _PROFILE = cProfile.Profile()
    _PROFILE.enable()
    _WRITTEN: list = []
    TOP = 60
    SKIP = ("~", "<frozen", "<string>", "/threading.py", "/runpy.py", "/multiprocessing/")

    def _short(path: str) -> str:
        if "site-packages/" in path:
            return path.split("site-packages/")[-1]
        return "pipeline/" + path.split("/pipeline/")[-1] if "/pipeline/" in path else os.path.basename(path)

    def _write() -> None:
        if _WRITTEN:
            return
        _WRITTEN.append(True)
        _PROFILE.disable()
        import pstats

        stats = pstats.Stats(_PROFILE).stats
        rows = []
        for (path, line, name), (_, calls, _, cumulative, _) in stats.items():
            if any(s in path for s in SKIP):
                continue
            rows.append({"function": f"{_short(path)}:{line}({name})", "calls": calls, "cumulative_s": round(cumulative, 4)})
        rows.sort(key=lambda r: -r["cumulative_s"])
        times = os.times()
        record = {
            "pid": os.getpid(), "argv": " ".join(sys.argv)[:120], "wall_s": round(time.time() - _START, 3),
            "cpu_user_s": round(times.user, 3), "cpu_system_s": round(times.system, 3),
            "mlflow_imported": "mlflow" in sys.modules, "top": rows[:TOP],
        }
        try:
            with open(os.path.join(_OUT, f"{os.getpid()}.json"), "w") as fh:
                json.dump(record, fh, indent=1)
        except OSError:
            pass

    _real_exit = os._exit

    def _exit_after_writing(code):
        _write()
        _real_exit(code)

    os._exit = _exit_after_writing
    atexit.register(_write)
