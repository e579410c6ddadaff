"""`python -m pipeline -m` with hydra/launcher=gpu and hydra/sweeper=optuna, as a user runs them."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import FAULT_ENV, user_config
from tests.integration.mlflow_helpers import runs

pytestmark = pytest.mark.slow

GPU_LAUNCHER = ["-m", "hydra/launcher=gpu"]


def job_dirs(workdir: Path) -> dict[int, Path]:
    """The sweep's job directories by job number."""
    found = [p for p in (workdir / "outputs" / "multirun").glob("*/*/*") if p.is_dir() and p.name.isdigit()]
    return {int(p.name): p for p in found}


def sweep_dir(workdir: Path) -> Path:
    (found,) = (workdir / "outputs" / "multirun").glob("*/*")
    return found


def span(job: Path) -> tuple[float, float]:
    state = json.loads((job / "run_state.json").read_text())
    return state["started"], state["ended"]


def overlapping(spans) -> bool:
    return any(a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(spans, 2))


def test_half_gpu_jobs_run_in_parallel_processes_pinned_to_their_slots(cli, tmp_path):
    # cpus_per_job=1 asks for four slots on this 2-CPU box (null would run only two jobs at once)
    proc = cli(*GPU_LAUNCHER, "hydra.launcher.gpus_per_job=0.5", "hydra.launcher.cpus_per_job=1", "model=lightgbm",
               "data.max_rows=1500", "seed=range(4)", "tracking=none", env={"PIPELINE_SIMULATE_GPUS": "2"},
               check=True, timeout=240)
    log = proc.stdout + proc.stderr
    for n, device in enumerate("0101"):
        assert f"#{n} : slot {n}: GPU {device} (0.5 of it), 1 CPU : model=lightgbm" in log
    jobs = job_dirs(tmp_path)
    assert sorted(jobs) == [0, 1, 2, 3]
    pids = {}
    for n, job in jobs.items():
        assert (job / ".hydra" / "overrides.yaml").exists()
        hardware = json.loads((job / "plan.json").read_text())["hardware"]
        # detect() in the job read PIPELINE_SLOT_GPUS (0.5) and the one device CUDA_VISIBLE_DEVICES showed
        assert (hardware["num_gpus"], hardware["devices"], hardware["source"]) == (0.5, [0], "launcher slot")
        timeline = json.loads((job / "timeline.json").read_text())
        assert {e["cuda_visible_devices"] for e in timeline} == {"01"[n % 2]}  # GPU 0, 1, 0, 1: idle first
        pids[n] = {e["pid"] for e in timeline}
    assert len(set().union(*pids.values())) == 4  # one process per job
    assert overlapping([span(job) for job in jobs.values()]), "the jobs ran one after another"


@pytest.mark.floods_the_box
def test_eight_parallel_jobs_share_one_sqlite_store(cli, tmp_path):
    proc = cli(*GPU_LAUNCHER, "hydra.launcher.gpus_per_job=0", "hydra.launcher.cpus_per_job=1",
               "hydra.launcher.n_jobs=8", "model=lightgbm", "data.max_rows=800",
               "model.lightgbm.params.num_iterations=30", "seed=range(8)", check=True, timeout=400)
    assert "database is locked" not in (proc.stdout + proc.stderr).lower()
    assert "Launching 8 jobs on 8 slot(s)" in proc.stdout + proc.stderr
    _, all_runs = runs(tmp_path)
    (parent,) = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    jobs = [r for r in all_runs if "pipeline.run_dir" in r.data.tags]
    assert len(jobs) == 8 and {r.info.status for r in jobs} == {"FINISHED"}
    assert parent.info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in jobs} == {parent.info.run_id}
    assert sorted(int(r.data.tags["pipeline.job_num"]) for r in jobs) == list(range(8))


def test_tracked_jobs_in_one_warm_worker_each_log_their_own_finished_run(cli, tmp_path):
    # one slot: the two jobs share a worker, and the tracker process it keeps between them
    cli(*GPU_LAUNCHER, "hydra.launcher.gpus_per_job=0", "hydra.launcher.n_jobs=1", "model=lightgbm",
        "data.max_rows=600", "model.lightgbm.params.num_iterations=20", "seed=range(2)", check=True, timeout=300)
    jobs = job_dirs(tmp_path)
    _, all_runs = runs(tmp_path)
    by_id = {r.info.run_id: r for r in all_runs if "pipeline.run_dir" in r.data.tags}
    assert len(by_id) == 2 and {r.info.status for r in by_id.values()} == {"FINISHED"}
    for n, job in jobs.items():
        run = by_id[json.loads((job / "run_state.json").read_text())["mlflow_run_id"]]
        assert int(run.data.tags["pipeline.job_num"]) == n and run.data.params["seed"] == str(n)
        assert Path(run.data.tags["pipeline.run_dir"]).resolve() == job.resolve()


SEARCH = [
    "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2",
    "hydra.sweeper.direction=maximize", "model=lightgbm", "data.max_rows=1500",
    "model.lightgbm.params.num_iterations=100", "tracking=none",
]
LR, LEAVES = "model.lightgbm.params.learning_rate", "model.lightgbm.params.num_leaves"


@pytest.mark.parametrize(
    "launcher, space",
    [
        # the search space in hydra.sweeper.params (quoted: Hydra refuses sweeps of hydra.* keys) ...
        (["hydra/launcher=basic"], [f'hydra.sweeper.params.{LR}="tag(log, interval(0.01, 0.3))"',
                                    f'hydra.sweeper.params.{LEAVES}="int(interval(8, 64))"']),
        # ... or as sweeps on the command line
        (["hydra/launcher=gpu", "hydra.launcher.gpus_per_job=0"],
         [f"{LR}=tag(log, interval(0.01, 0.3))", f"{LEAVES}=int(interval(8, 64))"]),
    ],
    ids=["basic-launcher", "gpu-launcher"],
)
def test_optuna_sweep_samples_inside_the_ranges_and_reports_the_best(cli, tmp_path, launcher, space):
    proc = cli("-m", *launcher, *SEARCH, *space, check=True, timeout=300)
    jobs = job_dirs(tmp_path)
    assert sorted(jobs) == [0, 1, 2, 3]
    scores, sampled = {}, {}
    for n, job in jobs.items():
        lines = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        overrides = dict(o.split("=", 1) for o in lines)
        lr, leaves = float(overrides[LR]), overrides[LEAVES]
        assert 0.01 <= lr <= 0.3 and leaves.isdigit() and 8 <= int(leaves) <= 64
        assert overrides["model"] == "lightgbm" and overrides["data.max_rows"] == "1500"
        sampled[n] = {LR: lr, LEAVES: int(leaves)}
        scores[n] = pd.read_csv(job / "leaderboard.csv")["val_roc_auc"].max()
    assert len({tuple(s.values()) for s in sampled.values()}) == 4
    results = yaml.safe_load((sweep_dir(tmp_path) / "optimization_results.yaml").read_text())
    best_score = max(scores.values())
    assert results["best_value"] == pytest.approx(best_score)
    # jobs that tie on the best score (a small validation split makes that possible) are all the best
    tied = [sampled[n] for n in scores if scores[n] == best_score]
    assert any(results["best_params"] == pytest.approx(params) for params in tied), (results["best_params"], tied)
    assert results["n_trials"] == 4 and results["n_failed"] == 0
    assert "Best parameters:" in proc.stdout + proc.stderr


def killer_model(tmp_path):
    """A user's model option `killer`, whose first fit is killed (SIGKILL); its marker file says it was."""
    marker = tmp_path / "killed-once"
    return marker, user_config(
        tmp_path, "model", "killer",
        f"killer:\n  _target_: tests.fault_models.KillOnceModel\n  params: {{marker: '{marker}'}}\n",
    )


def test_a_killed_job_and_a_failing_job_fail_the_sweep_without_hanging(cli, tmp_path):
    marker, searchpath = killer_model(tmp_path)
    (tmp_path / "user_conf" / "model" / "boom.yaml").write_text(
        "boom:\n  _target_: tests.fault_models.FailingModel\n"
    )
    proc = cli(*GPU_LAUNCHER, "hydra.launcher.gpus_per_job=0", "hydra.launcher.n_jobs=2", "model=killer,boom",
               searchpath, "allowed_targets=[tests.]", "executor.max_retries=0", "data.max_rows=500",
               "tracking=none", env=FAULT_ENV, timeout=120)
    assert proc.returncode == 1
    assert marker.exists()
    died = r"job #0 \(model=killer .*\) died \(killed by signal SIGKILL\) before it returned a result"
    assert re.search(died, proc.stderr)
    assert "RuntimeError: injected failure" in proc.stderr  # job #1's own error, printed by the job
    assert "Traceback" not in proc.stderr
    assert "#1 : FAILED" in proc.stdout + proc.stderr


def test_a_slot_keeps_its_worker_warm_for_its_next_jobs_and_replaces_a_dead_one(cli, tmp_path):
    marker, searchpath = killer_model(tmp_path)
    # two slots of one simulated GPU each, five jobs: the slots take jobs as they free
    proc = cli(*GPU_LAUNCHER, "hydra.launcher.gpus_per_job=1", "hydra.launcher.cpus_per_job=1", "model=killer",
               "seed=range(5)", searchpath, "allowed_targets=[tests.]", "executor.max_retries=0",
               "data.max_rows=300", "tracking=none", env={**FAULT_ENV, "PIPELINE_SIMULATE_GPUS": "2"}, timeout=240)
    assert proc.returncode == 1  # the first fit killed its worker, which fails the sweep once every job has run
    (dead,) = re.findall(r"job #(\d) \(.*\) died \(killed by signal SIGKILL\)", proc.stderr)
    jobs = job_dirs(tmp_path)
    missing = [n for n, job in jobs.items() if n != int(dead) and not (job / "timeline.json").exists()]
    assert not missing, proc.stderr[-6000:]
    finished = {n: json.loads((job / "timeline.json").read_text()) for n, job in jobs.items() if n != int(dead)}
    assert len(finished) == 4
    device_of_pid = {}
    for n, timeline in finished.items():
        (pid,) = {e["pid"] for e in timeline}
        (device,) = {e["cuda_visible_devices"] for e in timeline}
        assert device_of_pid.setdefault(pid, device) == device  # a worker never changes its slot's device
    # four jobs in two processes, one per slot: the dead job's slot ran its next jobs in a fresh worker
    assert len(device_of_pid) == 2
    assert set(device_of_pid.values()) == {"0", "1"}


def test_sigterm_stops_the_sweep_and_its_jobs(tmp_path):
    import psutil

    records = tmp_path / "fits"  # a fit that finishes its 120 s sleep writes a record here
    searchpath = user_config(
        tmp_path, "model", "sleepy",
        "sleepy:\n  _target_: tests.fault_models.SleepModel\n"
        f"  params: {{seconds: 120, record_dir: '{records}'}}\n",
    )
    # in_process=never: the fits run in worker processes, so a job meets SIGTERM in its own main loop
    args = [*GPU_LAUNCHER, "hydra.launcher.gpus_per_job=0", "hydra.launcher.n_jobs=2", "model=sleepy",
            "seed=0,1", searchpath, "allowed_targets=[tests.]", "executor.in_process=never",
            "data.max_rows=300", "tracking=none"]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=tmp_path,
                            env={**os.environ, **FAULT_ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    outputs = tmp_path / "outputs"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            states = [json.loads(p.read_text()) for p in outputs.glob("multirun/*/*/*/run_state.json")]
            if len(states) == 2 and all(s.get("status") == "RUNNING" for s in states):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the jobs never started")
        # the job processes (spawn also starts multiprocessing's resource tracker, which ends with the driver)
        children = [c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]
        assert len(children) == 2
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert not records.exists()  # the sweep ended before either job's fit did: it did not wait for them
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM: stopping 2 running job(s)" in out + err
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
    states = [json.loads(p.read_text()) for p in outputs.glob("multirun/*/*/*/run_state.json")]
    assert [s["status"] for s in states] == ["KILLED", "KILLED"]


def test_search_starts_each_trial_as_soon_as_a_slot_frees(cli, tmp_path):
    # job 1 sleeps far longer than the others: trials 2 and 3 run on the slot job 0 freed, and end
    # before job 1 does (a batch of two would wait for job 1 before starting trial 2)
    searchpath = user_config(
        tmp_path, "model", "sleepy",
        "sleepy:\n  _target_: tests.fault_models.SleepModel\n"
        "  params: {seconds_by_job: [0.2, 12, 0.2, 0.2], job: '${hydra:job.num}', x: 0.5}\n",
    )
    proc = cli("-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2",
               "hydra/launcher=gpu", "hydra.launcher.gpus_per_job=0", "hydra.launcher.cpus_per_job=1",
               "model=sleepy", searchpath, "allowed_targets=[tests.]", "data.max_rows=300", "tracking=none",
               "hydra.sweeper.direction=maximize", "model.sleepy.params.x=interval(0, 1)", env=FAULT_ENV, check=True,
               timeout=300)
    log = [line for line in (proc.stdout + proc.stderr).splitlines() if re.search(r"#\d : (slot|COMPLETED)", line)]
    events = [("end" if "COMPLETED" in line else "start", int(re.search(r"#(\d)", line).group(1))) for line in log]
    assert events[:2] == [("start", 0), ("start", 1)], events
    assert events[2:] == [("end", 0), ("start", 2), ("end", 2), ("start", 3), ("end", 3), ("end", 1)], events


def test_two_objective_search_tags_its_pareto_front(cli, tmp_path):
    from tests.plugins.test_units import dominated

    proc = cli("-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2",
               "hydra.sweeper.direction=[maximize,minimize]", "objectives=[val_score,fit_seconds]",
               "hydra/launcher=gpu", "hydra.launcher.gpus_per_job=0", "hydra.launcher.cpus_per_job=1",
               "model=lightgbm", "data.max_rows=1500", "model.lightgbm.params.num_iterations=60",
               f"{LEAVES}=int(interval(15, 255))", check=True, timeout=400)
    jobs = job_dirs(tmp_path)
    values = {}
    for n, job in jobs.items():
        top = pd.read_csv(job / "leaderboard.csv").iloc[0]
        values[n] = [top["val_roc_auc"], top["fit_seconds"]]
    front = {n for n, v in values.items() if not any(dominated(v, w, (1, -1)) for w in values.values())}
    results = yaml.safe_load((sweep_dir(tmp_path) / "optimization_results.yaml").read_text())
    assert results["objectives"] == ["val_score", "fit_seconds"]
    assert {s["job"] for s in results["solutions"]} == front
    for s in results["solutions"]:
        assert s["values"] == pytest.approx(values[s["job"]])
    _, all_runs = runs(tmp_path)
    (parent,) = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4 and {r.info.status for r in children} == {"FINISHED"}
    tagged = {int(r.data.tags["pipeline.job_num"]) for r in children if r.data.tags.get("pipeline.pareto_front")}
    assert tagged == front
    assert parent.data.tags["pipeline.pareto_front_jobs"] == ",".join(map(str, sorted(front)))
    # named as the runs list shows them: the trial by its searched value, the parent by what it searches
    assert parent.info.run_name == "leaves (optuna: maximize val_score, minimize fit_seconds)"
    assert {r.info.run_name for r in children} == {f"leaves={r.data.params[LEAVES]}" for r in children}
    # the experiment's shared view shows the searched key beside the main metric, sorted by it
    client, _ = runs(tmp_path)
    tags = client.get_experiment(parent.info.experiment_id).tags
    view = json.loads(tags["mlflow.sharedViewState.pipeline"])
    assert view["orderByKey"] == "metrics.`val_roc_auc`" and view["orderByAsc"] is False
    assert f"params.`{LEAVES}`" in view["selectedColumns"]
    assert proc.stdout.rstrip().splitlines()[-1] == (
        f"all runs, best first: http://127.0.0.1:5000/#/experiments/{parent.info.experiment_id}"
        "/runs?viewStateShareKey=pipeline")


def test_two_directions_for_one_objective_are_refused_before_any_job(cli, tmp_path):
    proc = cli("-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=[maximize,minimize]", "model=lightgbm",
               f"{LEAVES}=int(interval(15, 255))", "tracking=none", timeout=120)
    assert proc.returncode == 1
    assert ("hydra.sweeper.direction=[maximize, minimize] names 2 objective(s) but objectives=['val_score'] "
            "makes each job return 1 value(s)") in proc.stderr
    assert "Traceback" not in proc.stderr and not job_dirs(tmp_path)
