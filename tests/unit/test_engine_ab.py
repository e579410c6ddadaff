"""The engine_ab bench suite: its arms' grammar, its arithmetic against arm A and the committed peers, and its
run order, with the engine's process replaced by a recorder (the suite's real runs are bench work)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from bench.common import Options
from bench.suites import engine_ab


def test_arms_parse_into_overrides():
    text = "B=model.lightgbm.params.early_stopping_round=300 hpo.pruning=false; C=seed=1;"
    assert engine_ab.parse_arms(text) == {
        "B": ["model.lightgbm.params.early_stopping_round=300", "hpo.pruning=false"], "C": ["seed=1"]}


@pytest.mark.parametrize("text", ["", " ; ", "B", "B=", "A=seed=1", "B=seed=1;B=seed=2", "2x=seed=1"])
def test_a_malformed_arm_is_refused_naming_it(text):
    with pytest.raises(ValueError, match="ENGINE_AB_ARMS") as info:
        engine_ab.parse_arms(text)
    assert "NAME=override" in str(info.value)


def test_compare_counts_each_direction_and_the_error_ratio():
    scores = {"bin": {"A": 0.80, "B": 0.84}, "reg": {"A": 10.0, "B": 12.5}, "mc": {"A": 0.5, "B": 0.5},
              "failed": {"A": 0.9, "B": float("nan")}}
    metrics = {"bin": "roc_auc", "reg": "rmse", "mc": "accuracy", "failed": "roc_auc"}
    peers = {"bin": (0.83, 0.82), "reg": (11.0, 13.0), "mc": (0.5, 0.51)}
    got = engine_ab.compare(scores, metrics, "B", peers)
    assert (got["higher"], got["lower"], got["same"]) == (1, 1, 1)  # an RMSE that rose: lower
    # errors: binary 0.20 -> 0.16 (x0.8), regression 10 -> 12.5 (x1.25), multiclass x1: geometric mean 1
    assert got["error_ratio"] == pytest.approx(1.0)
    assert got["above_peers"] == {"A": 1, "B": 1}  # A above both on reg only, B on bin only
    assert got["with_peers"] == 3


def test_committed_peer_scores_take_the_latest_pass_with_both_peers(tmp_path):
    def write(stamp, runs):
        doc = {"suites": {"equal_budget": {"settings": {"runs": runs}}}}
        (tmp_path / f"{stamp}-full.json").write_text(json.dumps(doc))

    def sides(flaml, autogluon):
        return {"FLAML": {"score_test": flaml}, "AutoGluon": {"score_test": autogluon}}

    write("20260101T000000Z", {"T": {"30": sides(0.7, 0.8)}})
    write("20260102T000000Z", {"T": {"30": sides(0.75, 0.85)},
                               "U": {"30": {"FLAML": {"score_test": 0.6}}}})  # AutoGluon missing: no record
    write("20260103T000000Z", {"T": {"120": sides(0.9, 0.9)}})
    assert engine_ab.committed_peer_scores(tmp_path, 30) == {"T": (0.75, 0.85)}


def test_run_interleaves_the_arms_per_table_and_removes_their_folders(tmp_path, monkeypatch):
    frame = pd.DataFrame({"x": range(20), "y": [0, 1] * 10})
    monkeypatch.setattr(engine_ab, "chosen_tables", lambda: {"T one": (frame, "y", "binary"),
                                                             "R": (frame, "x", "regression")})
    monkeypatch.setenv("ENGINE_AB_ARMS", "B=hpo.pruning=false")
    monkeypatch.setenv("EQUAL_BUDGET_LIMITS", "15,30")
    monkeypatch.setenv("EQUAL_BUDGET_SPLITS", "2")
    calls = []

    def fake_engine(overrides, run_dir, metric):
        run_dir.mkdir(parents=True)
        (run_dir / "model.pkl").write_bytes(b"x")
        calls.append((run_dir.name, overrides))
        arm_b = "hpo.pruning=false" in overrides
        score = {"roc_auc": 0.7 + 0.1 * arm_b, "rmse": 3.0 + arm_b}[metric]
        return {"score": score, "metric": metric, "wall_s": 1.0}

    monkeypatch.setattr(engine_ab, "_engine", fake_engine)
    monkeypatch.setattr(engine_ab, "RESULTS", tmp_path / "none")
    out = engine_ab.run(Options(quick=False, repeats=None, scratch=tmp_path, bio_train=tmp_path,
                                autogluon_python=tmp_path))
    assert [name for name, _ in calls] == ["A0", "B0", "A1", "B1"] * 2  # A then B on each table and split
    assert all("time_limit_s=15" in o and "tracking=none" in o for _, o in calls)
    assert [o[-1] for name, o in calls if name.startswith("B")] == ["hpo.pruning=false"] * 4
    assert sum("data.seed=1" in o for _, o in calls) == 4
    assert not list((tmp_path / "engine_ab").rglob("model.pkl"))  # each run's folder removed once scored
    by_name = {f["name"]: f for f in out["figures"]}
    assert by_name["T one · B − A"]["median"] == pytest.approx(0.1)
    assert by_name["R (split 1) · B − A"]["median"] == pytest.approx(-1.0)  # RMSE up: worse
    assert by_name["B: tables higher than A"]["median"] == 2
    assert by_name["B: tables lower than A"]["median"] == 2
    assert by_name["B: tables the same as A"]["median"] == 0
    ratio = math.sqrt((0.2 / 0.3) * (4.0 / 3.0))
    assert by_name["B: error / A's error, geometric mean"]["median"] == pytest.approx(ratio)
    assert out["settings"]["arms"] == {"A": "", "B": "hpo.pruning=false"}


def test_run_refuses_missing_arms_before_any_fit(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGINE_AB_ARMS", raising=False)
    monkeypatch.setattr(engine_ab, "_engine", lambda *a: pytest.fail("an engine run started"))
    with pytest.raises(ValueError, match="names no arm"):
        engine_ab.run(Options(quick=False, repeats=None, scratch=tmp_path, bio_train=tmp_path,
                              autogluon_python=tmp_path))


def test_each_figure_of_a_run_with_several_arms_has_a_name_of_its_own(tmp_path, monkeypatch):
    frame = pd.DataFrame({"x": range(20), "y": [0, 1] * 10})
    monkeypatch.setattr(engine_ab, "chosen_tables", lambda: {"T": (frame, "y", "binary")})
    monkeypatch.setenv("ENGINE_AB_ARMS", "B=hpo.pruning=false;C=seed=1")
    monkeypatch.setattr(engine_ab, "_engine", lambda overrides, run_dir, metric: {"score": 0.7})
    monkeypatch.setattr(engine_ab, "committed_peer_scores", lambda folder, limit: {"T": (0.6, 0.65)})
    out = engine_ab.run(Options(quick=False, repeats=None, scratch=tmp_path, bio_train=tmp_path,
                                autogluon_python=tmp_path))
    names = [f["name"] for f in out["figures"]]
    assert len(names) == len(set(names))
    assert "C vs A: A at or above both peers' committed scores (of 1)" in names
