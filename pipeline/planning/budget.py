"""How a time budget is spent: with `time_limit_s` given and no `hpo` chosen, the run searches with
hpo=auto (each model's own params, then its kind's portfolio of proven configurations, then TPE with
pruning: pipeline.searchers.AutoSearch) for as many trials as the budget lets finish (`hpo.pruning`,
`hpo.num_trials` and `hpo.seed` on the command line tune it, as a key under a model tunes the model);
hpo=auto without a limit is refused, since nothing would end its trials. Where the budget allows for the
table's size and no parallelism was chosen, its trials are 5-fold bags (`bagging_fits`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from pathlib import Path
from typing import Optional

from pipeline.components import HpoConf
from pipeline.errors import ConfigError
from pipeline.planning.busy_box import busy_machine
from pipeline.redact import flatten
from pipeline.settings import Settings, hpo_keys_set, hpo_left_to_budget, models_chosen, overridden

log = logging.getLogger("pipeline")

AUTO = "pipeline.searchers.AutoSearch"
IN_DRIVER_UP_TO_S = 60.0  # a limit this short fits hpo=auto's trials in the driver: no worker pool to start
# ...unless the pool is estimated to fit this many times as much. The driver fits one at a time, each with
# every CPU; a GBM fit keeps a share of its one-thread time serial (pipeline.planning.payoff), so the pool's
# fits, one thread each, get cpus x fit_time(cpus) times as much done: 1.3 on 2 CPUs, 1.9 on 4, 2.2 on 5,
# 3.1 on 8, 5.5 on 16. On 2 CPUs whole 30-s runs with the pool ran 1.0 to 2.3 times the driver's fits (median
# 1.6) and scored lower on 7 of 12 tables, higher on 4: its one-thread fits end later, and it starts first
# (docs/time_budget.md). So the pool is kept where it is estimated to fit twice as much: from 5 CPUs
POOL_FITS_FROM = 2.0
BAG_FOLDS = 5
# FLAML's rule for cross-validation over a holdout (flaml.automl eval_method="auto", flaml.config): the
# training cells (rows x features / 0.9) under 10 million per hour of budget, and under 100,000 rows. It
# decides which tables are small enough for the added regression kinds (their time and memory grow with the
# rows)
CELLS_PER_HOUR, BAG_ROWS_UNDER = 10_000_000, 100_000
# hpo=auto's trials are bags up to 8 times FLAML's cells: with successive halving a losing trial's bag costs
# about one fold, and a search choosing among hundreds of trials on a few hundred validation rows picks
# noise. Between FLAML's rule and 4 times it, bagged runs scored higher on the test rows on 22 of 28
# table-splits; between 4 and 8 times (Adult, Caravan, diamonds at 30 s), on 10 of 12, now that a first
# trial the budget cuts keeps the folds that ended (docs/time_budget.md). On the 2-core box the bound's
# default bags take about 80% of the fits' time
BAG_CELLS_PER_HOUR = 80_000_000
# what hpo=auto adds on a table small for the budget (`with_added_kinds`): (the kind, what it is, the problem
# types it joins on, the params it starts from over its own); the packages it needs are its profile's
# `modules`. Each was chosen by its gain as one more ensemble candidate on the bench's tables at 30 s
# (docs/time_budget.md). At that budget an added forest fits little beyond its first trial: the random
# forest's starts from trees of at most 128 leaves, which scored above whole trees on 5 of 7 multiclass
# tables of the bench (5-fold CV) and in whole 30-s runs higher on 5 of 24 table-splits, lower on 1. k nearest
# neighbours remember what trees only approximate (rows repeated with their label: voteincome's ROC AUC
# 0.861 -> 0.925); among several classes and on a number to predict they did not pay
ADDED_KINDS = (
    ("extra_trees", "scikit-learn's extremely randomised trees", ("regression",), {}),
    ("catboost", "CatBoost's ordered boosting", ("regression",), {}),
    ("linear", "a linear model choosing its own penalty", ("regression", "binary", "multiclass"), {}),
    ("random_forest", "scikit-learn's random forest, its trees of at most 128 leaves", ("multiclass",),
     {"max_leaf_nodes": 128}),
    ("knn", "k nearest neighbours choosing their own number", ("binary",), {}),
)

# the share of the limit an added kind's bag may take where its time grows faster than the rows (a kind's
# profile's `bag_seconds`: k nearest neighbours'): one query cannot be stopped by the deadline
ADDED_BAG_SHARE = 0.1


# the keys under `hpo` a command line may set to tune hpo=auto rather than choose another searcher
AUTO_TUNABLE = ("num_trials", "pruning", "seed")


def _auto_hpo(chosen: HpoConf, tuned: set[str]) -> HpoConf:
    """hpo=auto's settings, with the keys of AUTO_TUNABLE the command line set kept (num_trials is a
    ceiling); any other key under hpo belongs to a searcher the user did not choose, and is refused."""
    other = sorted(tuned - set(AUTO_TUNABLE))
    if other:
        key = other[0]
        searcher = "grid" if key == "grid_points" else "tpe"
        raise ConfigError(
            f"hpo.{key}={_shown(getattr(chosen, key, None))}: under time_limit_s with no hpo chosen the run "
            f"searches with hpo=auto, which takes {', '.join('hpo.' + k for k in AUTO_TUNABLE)}; choose the "
            f"searcher hpo.{key} is for (e.g. hpo={searcher} hpo.{key}=...), or leave it out")
    auto = HpoConf(num_trials=1000, seed=chosen.seed, start_from_defaults=True, pruning=True, _target_=AUTO)
    return dataclasses.replace(auto, **{key: getattr(chosen, key) for key in AUTO_TUNABLE if key in tuned})


def _shown(value) -> str:
    """A value as the command line writes it (`false`, not `False`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def search_for_budget(settings: Settings, overrides: tuple[str, ...],
                      base_dir: Optional[Path] = None) -> Settings:
    """`settings`, with hpo=auto when time_limit_s is set and the user chose no hpo (said on the terminal),
    and `refit` decided where it was left to the engine (null: false unless `refits_answer`). `overrides`:
    what the user chose (pipeline.runtime.Runtime.choices); a group among them is left as chosen."""
    settings = _searched(settings, overrides, base_dir)
    if settings.conf.refit is not None:
        return settings
    params = {**settings.params, "refit": False} if "refit" in settings.params else settings.params
    return dataclasses.replace(settings, conf=dataclasses.replace(settings.conf, refit=False), params=params)


def _searched(settings: Settings, overrides: tuple[str, ...], base_dir: Optional[Path]) -> Settings:
    from pipeline.searchers import AutoSearch

    conf = settings.conf
    limited = conf.time_limit_s is not None or conf.fit_time_limit_s is not None
    if isinstance(conf.hpo.make_searcher(), AutoSearch) and not limited:
        raise ConfigError("hpo=auto searches for as long as a time budget allows: set time_limit_s (e.g. "
                          "time_limit_s=60), or choose hpo=tpe or hpo=random with hpo.num_trials")
    if not hpo_left_to_budget(conf, overrides):
        return settings
    tuned = hpo_keys_set(overrides)
    empty = [s.name for s in settings.models if not s.search_space]
    if empty:
        log.warning("time_limit_s is set but model(s) %s have no search_space: hpo stays none", ", ".join(empty))
        return settings
    hpo = _auto_hpo(conf.hpo, tuned)
    from pipeline import report

    kept = "".join(f", hpo.{key}={_shown(getattr(hpo, key))} as set" for key in AUTO_TUNABLE if key in tuned)
    report.console.print(
        f"hpo=auto: time_limit_s={conf.time_limit_s:g} is set and no hpo was chosen, so each model fits its own "
        f"params, then its kind's proven configurations, then a TPE search{' with pruning' * hpo.pruning}, "
        f"for as many trials as finish in time{kept} (hpo=none: one trial of each model's own params)",
        highlight=False)
    changes = {"hpo._target_": AUTO, "hpo.num_trials": hpo.num_trials, "hpo.pruning": hpo.pruning}
    executor = conf.executor
    short = _short_and_local(settings, overrides)
    cpus = _fit_cpus(settings) if short else 1
    if short and pool_gain(cpus) >= POOL_FITS_FROM:
        report.console.print(
            f"hpo=auto under time_limit_s={conf.time_limit_s:g}: the trials keep the worker pool, several "
            f"fits at once, since on {cpus} CPUs it fits about {pool_gain(cpus):.1f} times as much as one "
            "fit at a time with every CPU in the driver (executor.in_process=always fits in the driver)",
            highlight=False)
    elif short:
        # the pool's start (each worker importing LightGBM, XGBoost, torch) measured 3 s on the idle 2-core
        # box and 20 s under load: a short budget cannot spare it, and the default run has none to start
        executor = dataclasses.replace(executor, in_process="always")
        changes["executor.in_process"] = "always"
    parallelism = conf.parallelism
    if executor.in_process == "always":
        chosen = overridden("parallelism", overrides)
        busy = None if chosen else busy_machine()
        if not chosen and busy is None:
            # one fit at a time: a fit planned for one CPU of several would leave the others idle
            parallelism = dataclasses.replace(parallelism, sequential=True)
            changes["parallelism.sequential"] = True
        threads = (" and each with the CPUs the chosen parallelism gives it" if chosen
                   else " and each with all the CPUs" if busy is None
                   else " and each with the CPUs a fit of several at once gets, not all of them: the "
                        f"machine is busy ({busy}), where threads waiting for a CPU slow a fit down")
        report.console.print(
            f"hpo=auto under time_limit_s={conf.time_limit_s:g} (<= {IN_DRIVER_UP_TO_S:g} s): the trials are "
            f"fitted in the driver, one at a time{threads}, so no worker pool's start spends the budget "
            "(executor.in_process=never keeps the pool)", highlight=False)
    from pipeline.memory.shape import data_shape

    base_dir = base_dir or Path.cwd()
    shape = data_shape(conf.data, base_dir, settings.source)  # read once: bagging and the added kinds ask
    problem = None  # the label column read once, where the bags ask: the refits and the added kinds do
    if bagging_fits(settings, overrides, shape):
        parallelism = dataclasses.replace(parallelism, num_folds=BAG_FOLDS)
        changes["parallelism.num_folds"] = BAG_FOLDS
        report.console.print(
            f"hpo=auto under time_limit_s={conf.time_limit_s:g}: each trial is a {BAG_FOLDS}-fold bag, "
            "scored out of fold on every training row, since the table is small for the budget (rows x "
            f"features / 0.9 under {BAG_CELLS_PER_HOUR / 1e6:g} million per hour of budget, "
            f"{BAG_CELLS_PER_HOUR / CELLS_PER_HOUR:g} times FLAML's rule for cross-validation, "
            f"under {BAG_ROWS_UNDER:,} rows); "
            "losing trials stop after their first folds (parallelism=default keeps one holdout fit)",
            highlight=False)
        problem = settings.source.problem_type(base_dir)
        if refits_answer(settings, problem):
            conf = dataclasses.replace(conf, refit=True)
            changes["refit"] = True
            report.console.print(
                f"hpo=auto under time_limit_s={conf.time_limit_s:g}: a number to predict on a table small "
                "for the budget, so each model's best trial is fitted once more on every training row "
                "(refit=true) and the run answers with ensemble_blend, the mean of the bagged ensemble's and "
                "the refits' ensemble's predictions (refit=false keeps the bags alone)", highlight=False)
    params = dict(settings.params)
    for key, value in changes.items():
        if key in params:
            params[key] = value
    from pipeline.config_checks import check_parallelism

    # the levels derive from parallelism: checked again as the settings' own were
    settings = dataclasses.replace(settings, conf=dataclasses.replace(conf, hpo=hpo, executor=executor,
                                                                      parallelism=parallelism),
                                   levels=check_parallelism(parallelism), params=params)
    return with_added_kinds(settings, overrides, base_dir, shape, problem)


def bagging_fits(settings: Settings, overrides: tuple[str, ...], shape) -> bool:
    """Whether hpo=auto's trials are 5-fold bags rather than one holdout fit: no parallelism chosen, no
    stacking (which sets its own folds), and a table small for the budget (`BAG_CELLS_PER_HOUR`); `shape` is
    the table's as the plan reads it (pipeline.memory.shape), None where unknown, which keeps the holdout."""
    conf = settings.conf
    if overridden("parallelism", overrides) or conf.parallelism.num_folds > 1 or conf.stack_levels:
        return False
    return small_for_budget(settings, shape, BAG_CELLS_PER_HOUR)


def refits_answer(settings: Settings, problem: Optional[str]) -> bool:
    """Whether hpo=auto's bagged run also refits each model on every row and answers with the blend of both
    ensembles: on a number to predict, unless refit was set. A fold model never sees a fifth of the rows; on
    a panel (a firm's, a state's years) that fifth holds what the others say of its entity, and the refits
    learn it: on 43 regression tables at 30 s, two splits each, the answer was better on 52 of 86 and worse
    on 33 (EmplUK's RMSE 1.661 -> 1.449). Classes gained nothing (docs/time_budget.md). `refit` set (true or
    false, on the command line or in a config) is the user's: only null leaves it to the engine."""
    return problem == "regression" and settings.conf.refit is None


def training_rows(settings: Settings, shape) -> float:
    """The rows left for training and validation once the test rows are set aside."""
    test = shape.test_rows if shape.test_rows is not None else shape.rows * settings.conf.data.test_size
    return shape.rows - test


def small_for_budget(settings: Settings, shape, cells_per_hour: float = CELLS_PER_HOUR) -> bool:
    """FLAML's rule, training rows x features / 0.9 under `cells_per_hour` per hour of budget (its own 10
    million by default) and under 100,000 rows (an unknown shape, None, is not small)."""
    if shape is None:
        return False
    rows, hours = training_rows(settings, shape), settings.conf.time_limit_s / 3600
    return rows < BAG_ROWS_UNDER and rows * shape.features / 0.9 < cells_per_hour * hours


def _too_slow(settings: Settings, shape, profile) -> Optional[str]:
    """Why an added kind whose cost grows faster than its rows (its profile's `bag_seconds`) is left out:
    a bag would take more than `ADDED_BAG_SHARE` of the limit; None where it fits."""
    if profile.bag_seconds is None:
        return None
    seconds = profile.bag_seconds(int(training_rows(settings, shape)), shape)
    limit = settings.conf.time_limit_s
    if seconds <= ADDED_BAG_SHARE * limit:
        return None
    return (f"a 5-fold bag would take about {seconds:,.0f} s on one CPU, more than {ADDED_BAG_SHARE:.0%} of "
            f"time_limit_s={limit:g}, as its time grows faster than the rows")


def with_added_kinds(settings: Settings, overrides: tuple[str, ...], base_dir: Path, shape,
                     problem: Optional[str] = None) -> Settings:
    """hpo=auto's models, with the kinds of `ADDED_KINDS` for the table's problem type beside the default ones
    where no model was chosen, no levels are stacked (the kinds it would add are named) and the table is
    small for the budget: AutoGluon fits forests, CatBoost and a
    linear model among its defaults, and on a number to predict an ensemble of LightGBM and XGBoost gains
    from the forests' smooth averages, CatBoost's ordered boosting and a linear trend trees can only
    approximate in steps. On classification tables extremely randomised trees and CatBoost added nothing the
    ensemble kept beside the network, and their time was the others'; the linear model, a tenth of a second
    a fit, gives the classes' log-odds as a line where the choice is one, and among several classes a random
    forest's averaged votes gained where on two classes and on a number they did not; on two classes k
    nearest neighbours answer a row from the rows most like it, which trees only approximate
    (docs/time_budget.md).
    The forests' memory and CatBoost's time grow with the rows, hence the table's size. A kind whose library
    is not installed, or whose bag would take more than `ADDED_BAG_SHARE` of the limit (`_too_slow`), is said
    and left out. `problem`: the table's problem type where read already."""
    conf = settings.conf
    if models_chosen(overrides) or not small_for_budget(settings, shape):
        return settings
    problem = problem or settings.source.problem_type(base_dir)  # None: unknown before loading
    if problem is None:
        return settings
    from pipeline import report

    if conf.stack_levels:
        kept_out = [name for name, _, problems, _ in ADDED_KINDS
                    if name not in conf.model and problem in problems]
        if kept_out:
            models = ",".join([*conf.model, *kept_out])
            report.console.print(
                f"hpo=auto under time_limit_s={conf.time_limit_s:g} with stack_levels={conf.stack_levels}: "
                f"{_listed(kept_out)}, which join the models on a table this small without stacking, do not "
                f"here (model=[{models}] adds them)", highlight=False, markup=False)
        return settings

    added, left_out = [], []
    for name, what, problems, start in ADDED_KINDS:
        if name in conf.model or problem not in problems:
            continue
        tree, spec = _kind(settings, name, start)
        absent = [m for m in spec.cls.profile.modules if importlib.util.find_spec(m.split(".")[0]) is None]
        if absent:
            package = absent[0].split(".")[0]
            left_out.append(f"{name} ({package} is not installed: pip install 'tabular-pipeline[{name}]', "
                            f"or pip install {package})")
            continue
        slow = _too_slow(settings, shape, spec.cls.profile)
        if slow:
            left_out.append(f"{name} ({slow})")
            continue
        settings = _with_kind(settings, name, tree, spec)
        added.append(f"{name} ({what})")
    if added:
        report.console.print(
            f"hpo=auto under time_limit_s={conf.time_limit_s:g}: {_listed(added)} join"
            f"{'s' if len(added) == 1 else ''} the models, since the table is small for the budget; "
            f"{'its' if len(added) == 1 else 'their'} fits are candidates for the ensemble "
            "(model=... chooses your own models)", highlight=False)
    if left_out:
        report.console.print(f"hpo=auto: left out: {'; '.join(left_out)}", highlight=False, markup=False)
    return settings


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _kind(settings: Settings, name: str, start: Optional[dict] = None):
    """The model kind conf/model/<name>.yaml, its params updated with `start`: its config tree and its checked
    spec (the adapter's class imported, not its library)."""
    from omegaconf import OmegaConf

    from pipeline.config import CONFIG_DIR, ModelSpecConf
    from pipeline.settings import model_spec, typed

    tree = OmegaConf.load(Path(CONFIG_DIR) / "model" / f"{name}.yaml")[name]
    for key, value in (start or {}).items():
        tree.params[key] = value
    return tree, model_spec(name, typed(tree, ModelSpecConf), settings.allowed_targets)


def _with_kind(settings: Settings, name: str, tree, spec) -> Settings:
    """`settings` with the model kind `name` (its tree and spec from `_kind`) added after the others."""
    from omegaconf import OmegaConf

    params = {**settings.params, **{f"model.{name}.{k}": v for k, v in
                                    flatten(OmegaConf.to_container(tree, resolve=True)).items()}}
    conf = settings.conf
    models = {**conf.model, name: spec.conf}
    added = dataclasses.replace(spec, added=True)
    return dataclasses.replace(settings, conf=dataclasses.replace(conf, model=models),
                               models=(*settings.models, added), params=params)


def _short_and_local(settings: Settings, overrides: tuple[str, ...]) -> bool:
    """Whether hpo=auto's fits may run in the driver: a short limit, the local executor left to choose
    (in_process=auto, no task timeout, which needs worker processes), no executor setting overridden."""
    from pipeline.config import LOCAL_EXECUTOR

    ex = settings.conf.executor
    return (settings.conf.time_limit_s <= IN_DRIVER_UP_TO_S and not overridden("executor", overrides)
            and ex._target_ == LOCAL_EXECUTOR and ex.in_process == "auto" and ex.task_timeout_s is None)


def _fit_cpus(settings: Settings) -> int:
    """The CPUs the run's fits share: the declared hardware's, else this job's (`hardware.job_cpus`)."""
    from pipeline import hardware

    declared = settings.conf.hardware
    if declared is not None and declared.num_cpus is not None:
        return int(declared.num_cpus)
    return hardware.job_cpus()


def pool_gain(cpus: int) -> float:
    """How many times as much a worker pool's fits on `cpus` CPUs, one thread each, get done as one fit at
    a time with every CPU (the driver's): cpus x fit_time(cpus), the planner's estimate for a GBM fit
    (`pipeline.planning.payoff`)."""
    from pipeline.planning.payoff import fit_time

    return cpus * fit_time(cpus)
