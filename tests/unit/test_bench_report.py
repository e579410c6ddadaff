"""The benchmark report's glance at the targets: a suite measured in parts (the scale suite's 10M rows
in a run of their own) shows every part, each from the newest run that measured it; a --quick run
speaks for a suite only where no full run measured it."""

from bench.report import _targets


def _run(file: str, groups: dict, mode: str = "full") -> dict:
    figures = [{"group": g, "name": "engine / plain wall", "unit": "ratio", "median": v, "min": v, "max": v, "n": 1,
                "target": {"op": "<=", "value": 1.02}, "meets_target": v <= 1.02} for g, v in groups.items()]
    return {"_file": file, "mode": mode, "suites": {"scale": {"figures": figures}}}


def test_each_group_comes_from_the_newest_run_that_measured_it():
    newest = _run("new.json", {"lightgbm · 10M rows": 1.03})
    older = _run("old.json", {"lightgbm · 200k rows": 1.01, "lightgbm · 10M rows": 0.98})
    rows = [r for r in _targets([("box", [newest, older])]) if r.startswith("| box")]
    assert rows == [
        "| box | full | scale | lightgbm · 10M rows · engine / plain wall | 1.03× vs target ≤ 1.02×: **missed** | `new.json` |",
        "| box | full | scale | lightgbm · 200k rows · engine / plain wall | 1.01× vs target ≤ 1.02×: met | `old.json` |",
    ]


def test_a_quick_run_is_left_out_where_a_full_run_measured_the_suite():
    quick = _run("quick.json", {"lightgbm · 20k rows": 1.50}, mode="quick")
    full = _run("full.json", {"lightgbm · 200k rows": 1.01})
    rows = [r for r in _targets([("box", [quick, full])]) if r.startswith("| box")]
    assert rows == [
        "| box | full | scale | lightgbm · 200k rows · engine / plain wall | 1.01× vs target ≤ 1.02×: met | `full.json` |",
    ]
    alone = [r for r in _targets([("box", [quick])]) if r.startswith("| box")]
    assert alone == [
        "| box | quick | scale | lightgbm · 20k rows · engine / plain wall | 1.50× vs target ≤ 1.02×: **missed** | `quick.json` |",
    ]
