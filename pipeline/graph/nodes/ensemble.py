"""The ensemble node: each model's best trial (and each stacked level's bag) as a predictor with its
leaderboard row, and, with two models or more at the last level, their weighted ensemble (Caruana
selection on the out-of-fold predictions). Where a time budget kept a first trial with fewer folds, the
rows are scored and the weights chosen on the held-out rows every candidate predicted (`shared_rows`),
except that a kind hpo=auto added never cuts the default run's models' rows (`covering`).
The run's hooks log the board (pipeline.outputs)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Collection, Optional, Sequence

from pipeline.graph.nodes import NodeKind, register
from pipeline.graph.nodes.context import ensemble_seconds, leaderboard_row, rows_per_second, seconds_of
from pipeline.graph.retention import TRIALS_PER_MODEL  # the trials graph.retention keeps for it

log = logging.getLogger(__name__)


@dataclass
class Board:
    """Leaderboard rows and the predictors they score; evaluation concatenates its inputs' boards."""

    rows: list[dict]
    predictors: dict  # name -> BaggedPredictor | EnsemblePredictor
    best: dict = field(default_factory=dict)  # model -> its best TrialResult
    schema: object = None  # FeatureSchema the predictors type their input with
    test_preds: dict = field(default_factory=dict)  # the weighted ensemble's test predictions (for the blend)
    lead: Optional[str] = None  # the row the leaderboard shows first whatever its score (the run's answer)


@register
class EnsembleNode(NodeKind):
    name = "ensemble"
    partial_inputs = True  # the models with a complete trial, when a time limit cut the others

    def run(self, task, inputs, ctx) -> Board:
        from pipeline import metrics as metrics_module
        from pipeline.ensemble import FeatureSchema

        data, metric = ctx.data, ctx.metric
        problem = data.problem_type
        names = list(dict.fromkeys(inputs[i].model for i in task.depends_on if i in inputs))
        chooser = ctx.search_metric  # what each trial's score is under: the log loss under accuracy
        best = {name: ctx.outcome.best(name, chooser) for name in names}
        searched = all(t.level == 1 for t in best.values()) and not any(t.kind == "refit" for t in ctx.plan.tasks)
        guard = getattr(ctx.trials, "noise_guard", False)  # hpo=auto (TrialSource.noise_guard)
        if searched and guard:  # a refit or a stacked level has read each model's best trial already
            best = {name: _best_or_own(ctx.outcome, name, t, chooser, data) for name, t in best.items()}
        kinds = [a.model for a in ctx.plan.allocations]
        schema = FeatureSchema.of(data.X, data.raw_dtypes, data.label, ctx.unseen_categories, data.features)
        rows, predictors, seconds = [], {}, {}
        own = getattr(ctx.trials, "default_models", None)  # the default run's models; None: every model
        behind = ctx.standing.behind() if ctx.standing is not None else ()
        whole, _ = covering(best, [n for n in best if own is None or n in own], behind)
        shared = shared_rows(whole)  # where a first trial kept fewer folds: the rows every model predicted
        for name, trial in best.items():
            on = shared.get(name, trial)
            val_scores = metrics_module.score_all(problem, data.y[on.held_out], on.val_pred)
            test_scores = metrics_module.score_all(problem, data.y[data.test_idx], trial.test_pred)
            seconds[name] = _test_seconds(name, trial, best, kinds)
            rows.append(_row(name, trial, val_scores, test_scores, ctx.plan, len(data.test_idx),
                             seconds_of(seconds[name])))
            predictors[name] = bagged_predictor(name, trial, best, kinds, data, schema)
        top = max((t.level for t in best.values()), default=1)
        members = {n: t for n, t in best.items() if t.level == top}
        preds = {n: (t.held_out, t.val_pred, t.test_pred) for n, t in best.items()}
        if len(members) >= 2:
            extra = _other_trials(ctx.outcome, best, chooser, data, schema, seconds) if searched else {}
            floor = floor_members(members, extra, members if own is None else own)
            candidates = {**members, **{n: t for n, (t, _) in extra.items()}}
            row, preds["ensemble"] = _ensemble(candidates, data, metric, problem, predictors, seconds, top + 1,
                                               floor=floor, extra={n: p for n, (_, p) in extra.items()},
                                               noise_guard=guard, behind=behind)
            rows.append(row)
        if problem == "binary":
            for row in rows:
                _set_threshold(row, predictors[row["model"]], *preds[row["model"]], data, metric.name)
        board_order(rows, metric, lead="ensemble" if searched and guard else None)
        answer = {"ensemble": preds["ensemble"][2]} if "ensemble" in preds else {}
        return Board(rows, predictors, best, schema, answer)

    def describe(self, tasks, plan) -> str:
        names = [a.model for a in plan.allocations]
        top = plan.stack_levels + 1
        above = "" if top == 1 else " at level 2" if top == 2 else f" at levels 2 to {top}"
        bags = "the best trial of each model" + (f", its bags{above}" if above else "")
        if len(names) >= 2:
            return f"ensemble: {bags}, and the weighted ensemble of the {len(names)} models at level {top}"
        return f"ensemble: {bags}" if names else "ensemble: no model"


def board_order(rows: list[dict], metric, lead: Optional[str] = None) -> None:
    """Sort `rows` best first by their held-out score (NaN last), `lead`'s row first whatever its score: under
    hpo=auto the ensemble is the run's answer whichever selection it kept, even where a member it left out
    scores higher on the held-out rows by less than their noise."""
    rows.sort(key=lambda r: (r["model"] != lead, metric.loss_of(r[f"val_{metric.name}"])))


def floor_members(members: dict, extra: dict, default_models) -> list[str]:
    """The members whose ensemble a searched one must beat: the default run's, each of `default_models`'
    trial 0 (its row, or `extra`'s `<model> trial 0`); the kinds hpo=auto added are not among them. Under
    hpo=auto the searched selection is kept only for a held-out gain over it beyond the rows' noise, and
    the ensemble leads the board either way (`EnsembleNode.run`)."""
    floor = []
    for name, trial in members.items():
        if name not in default_models:
            continue
        if f"{name} trial 0" in extra:
            floor.append(f"{name} trial 0")
        elif getattr(trial, "trial", 0) == 0:
            floor.append(name)
    return floor


def bagged_predictor(name: str, trial, best: dict, kinds: list[str], data, schema):
    """A level-1 trial's BaggedPredictor; above level 1, a StackedPredictor whose fold k chains fold k of
    every kind's bag at each level below."""
    from pipeline.ensemble import BaggedPredictor, StackedPredictor
    from pipeline.graph.stacking import level_name

    models = [f.model for f in trial.folds]
    if trial.level == 1:
        return BaggedPredictor(name, models, data.problem_type, data.classes, schema)
    layers = [[[(kind, best[level_name(kind, level)].folds[k].model) for kind in kinds]
               for level in range(1, trial.level)] for k in range(len(models))]
    return StackedPredictor(name, models, data.problem_type, data.classes, schema, layers)


def _test_seconds(name: str, trial, best: dict, kinds: list[str]) -> dict:
    """What the predictor took on the test rows, per bag it predicts with: its own fold models', and
    above level 1 those of every level below, which it predicts with first."""
    from pipeline.graph.stacking import level_name

    below = {level_name(kind, level) for level in range(1, trial.level) for kind in kinds}
    return {name: trial.test_predict_seconds, **{bag: best[bag].test_predict_seconds for bag in below}}


def _row(name: str, trial, val: dict, test: dict, plan, test_rows: int, test_seconds) -> dict:
    devices = sorted({d for f in trial.folds for d in f.gpu_ids if f.device != "cpu"})
    device = "GPU " + plan.hardware.visible_devices(devices) if devices else "cpu"
    return leaderboard_row(name, val, test, fit_seconds=trial.fit_seconds, predict_seconds=trial.predict_seconds,
                           test_rows_per_s=rows_per_second(test_rows, test_seconds),
                           device=device, num_folds=len(trial.folds), best_trial=trial.trial, params=trial.params,
                           reused_folds=sum(bool(f.cached) for f in trial.folds), level=trial.level)


def _set_threshold(row: dict, predictor, held_out, val_pred, test_pred, data, eval_metric: str) -> None:
    """A binary predictor's threshold from its out-of-fold predictions; it, and the test score there, in its
    row."""
    import numpy as np

    from pipeline import metrics as metrics_module
    from pipeline import threshold as th

    name = th.label_metric(eval_metric)
    predictor.threshold = th.choose(data.y[held_out], val_pred, name)
    test_y = data.y[data.test_idx]
    row["threshold"] = predictor.threshold
    row["threshold_metric"] = name
    labels = th.one_hot(test_pred[:, 1], predictor.threshold)
    row[f"test_{name}_at_threshold"] = float(metrics_module.METRICS[name](test_y, labels))
    if len(np.unique(test_y)) > 1:  # test rows of one class: predicting it for all of them is right
        th.warn_one_class(row["model"], test_pred[:, 1], predictor.threshold, data.classes)


def _best_or_own(outcome, name: str, best, metric, data):
    """`name`'s best trial, or its trial 0 (the model's own params) where the best beats it on the held-out
    rows by no more than one standard error of the gain: the best of hundreds of trials is partly the
    one that fitted those rows' noise best (`_searched_or_floor` decides the same for the ensemble)."""
    import numpy as np

    from pipeline.ensemble import clear_gain

    own = outcome.trials.get((name, 0))
    if (own is None or own is best or own.pruned or own.released
            or not np.array_equal(own.held_out, best.held_out)):
        return best
    beats, _, noise = clear_gain(data.y[best.held_out], best.val_pred, own.val_pred, metric)
    if beats:
        return best
    log.info("%s: its own params (trial 0) kept: its best trial (%d) scored %s %.4g on the held-out rows against "
             "%.4g, a gain within one standard error of the rows' noise (%.2g)", name, best.trial, metric.name,
             best.score, own.score, noise)
    return own


def _other_trials(outcome, best: dict, metric, data, schema, seconds: dict) -> dict:
    """Beside each model's best trial, its next best complete trials and its trial 0 (the model's own
    params, what the default run fits) as members the ensemble may pick, named `<model> trial <n>`:
    the search's runners-up add variety, and the default run's members are always among the choices.
    Name -> (trial, predictor); no leaderboard row of their own."""
    from pipeline.ensemble import BaggedPredictor

    extra = {}
    for name, chosen in best.items():
        mine = (t for (m, _), t in outcome.trials.items()
                if m == name and not t.pruned and not t.released and t.level == 1)
        trials = sorted(mine, key=lambda t: metric.loss_of(t.score))
        for trial in [*trials[:TRIALS_PER_MODEL], *(t for t in trials if t.trial == 0)]:
            label = f"{name} trial {trial.trial}"
            if trial is chosen or label in extra:
                continue
            extra[label] = trial, BaggedPredictor(label, [f.model for f in trial.folds], data.problem_type,
                                                  data.classes, schema)
            seconds[label] = {label: trial.test_predict_seconds}
    return extra


MOST_ROWS = 0.75  # the share of the default run's held-out rows an added kind's folds must hold to stay


def covering(trials: dict, keep: Sequence[str], behind: Collection[str] = ()) -> tuple[dict, list[str]]:
    """(the candidates that predicted every held-out row the `keep` ones all predicted, or at least
    `MOST_ROWS` of them, the others' names). `keep`: the default run's members. A kind hpo=auto added whose
    first trial the budget cut to fewer folds is left out rather than cutting every candidate's rows to its
    folds': on Doctor at 30 s the linear model's 2 folds of 5 left the default run's selection about 1,660
    of the 4,152 held-out rows. One that ended most of its folds stays, and the rows are cut to them: on
    Snmesp at 30 s CatBoost, the best single model, ended 4 of 5 and, left out, the ensemble's test RMSE
    was 0.0636 against 0.0602 with its five. So is a
    default member with fewer folds than another whose kind is `behind` (its lead fold's error far behind
    the leader's, `LeadStanding.behind`, which gave its later folds less of the time): on Snmesp at 30 s
    the network (error 0.10 against CatBoost's 0.06) ended its lead alone, and every candidate was chosen
    on that fold's rows. One level with the leader keeps cutting the rows to its folds: on diamonds the
    network, 1.5% behind, ended 1 fold of 5, and the blend chosen on that fold's rows with it scored test RMSE
    531.6 against 538.6 for the blend chosen on every row without it."""
    import numpy as np

    keep = [n for n in keep if n in trials]
    if keep:
        most = max(len(trials[n].held_out) for n in keep)
        keep = [n for n in keep if len(trials[n].held_out) == most or n.split(" trial ")[0] not in behind]
    if not keep or len(keep) == len(trials):
        return trials, []
    rows = trials[keep[0]].held_out
    for name in keep[1:]:
        rows = np.intersect1d(rows, trials[name].held_out)
    out = [n for n, t in trials.items() if n not in keep and np.isin(rows, t.held_out).mean() < MOST_ROWS]
    return {n: t for n, t in trials.items() if n not in out}, out


def shared_rows(trials: dict) -> dict:
    """The candidates on the held-out rows all of them predicted: a first trial the budget cut holds out
    the rows of the folds that ended (graph.first_trials), the others every row. A candidate without any of
    the rows the others share is left out (those holding the fewest rows first)."""
    import dataclasses

    import numpy as np

    names = sorted(trials, key=lambda n: -len(trials[n].held_out))
    common = trials[names[0]].held_out
    if all(np.array_equal(t.held_out, common) for t in trials.values()):
        return trials
    kept = {}
    for name in names:
        rows = np.intersect1d(common, trials[name].held_out)
        if len(rows):
            common, kept[name] = rows, trials[name]
    out = {}
    for name, t in trials.items():
        if name in kept:
            at = np.searchsorted(t.held_out, common)  # a bag's held-out rows are sorted
            out[name] = dataclasses.replace(t, held_out=common, val_pred=t.val_pred[at])
    log.debug("ensemble: the %d held-out rows its %d candidates all predicted", len(common), len(out))
    return out


SELECTION_ROWS = 100_000  # held-out rows the ensemble's weights are chosen on, at most


def selection_rows(num_held: int):
    """The held-out rows (positions) the weights are chosen on: all of them up to SELECTION_ROWS, else
    that many drawn at random (seeded). The greedy selection scores every candidate at each of its steps:
    on 2 million rows ranked by ROC AUC, three members took 21 s; the weights' scores are on every row."""
    from pipeline.split import drawn

    rows = drawn(num_held, SELECTION_ROWS)
    if rows is None:
        return slice(None)
    log.info("ensemble: weights chosen on %s of the %s held-out rows (drawn at random)",
             f"{SELECTION_ROWS:,}", f"{num_held:,}")
    return rows


def _ensemble(best: dict, data, metric, problem: str, predictors: dict, seconds: dict, level: int,
              floor: Sequence[str] = (), extra: Optional[dict] = None, noise_guard: bool = False,
              behind: Collection[str] = ()) -> tuple:
    """The weighted ensemble's leaderboard row, and (held-out rows, their predictions, test predictions).
    `floor`: the members whose selection a searched one must beat (`floor_members`); the selection over
    them alone is kept where it scores better on the held-out rows, and with `noise_guard` (hpo=auto) unless
    the selection over all scores better by more than one standard error of that gain
    (`pipeline.ensemble.gain_noise`): a search's choice among hundreds of trials fits some of the held-out
    rows' noise, and a gain within it is not one to trust. `extra`:
    the predictors of members without a row (`_other_trials`), in the ensemble only where picked. The weights
    and the guard's gain are scored by `metrics.choice_metric`: the log loss where the metric reads only
    each row's predicted class (accuracy)."""
    import numpy as np

    from pipeline import metrics as metrics_module
    from pipeline.ensemble import EnsemblePredictor, blend, ensemble_selection

    best, short = covering(best, floor, behind)
    best = shared_rows(best)
    if short:
        log.info("ensemble: %s left out: the budget ended %s with fewer folds than the default run's models, "
                 "whose %s held-out rows the weights are chosen on", ", ".join(short),
                 "its first trial" if len(short) == 1 else "their first trials",
                 f"{len(next(iter(best.values())).held_out):,}")
    floor = [n for n in floor if n in best]
    trials = list(best.values())
    held = trials[0].held_out
    t0 = time.perf_counter()
    rows = selection_rows(len(held))
    y, preds = data.y[held][rows], {n: t.val_pred[rows] for n, t in best.items()}
    members = list(preds.values())
    chooser = metrics_module.choice_metric(metric)
    if chooser is not metric:
        log.info("ensemble: weights chosen by the held-out rows' %s, not their %s, which reads only each "
                 "row's likeliest class", chooser.name, metric.name)
    weights = ensemble_selection(members, y, chooser, names=list(best))
    if floor and set(floor) != set(best):
        own = ensemble_selection([preds[n] for n in floor], y, chooser, names=list(floor))
        mine = np.asarray([own[list(floor).index(n)] if n in floor else 0.0 for n in best])
        weights = _searched_or_floor(y, members, weights, mine, chooser, noise_guard)
    selection_seconds = time.perf_counter() - t0
    val_pred = blend([t.val_pred for t in trials], weights)
    test_pred = blend([t.test_pred for t in trials], weights)
    val_scores = metrics_module.score_all(problem, data.y[held], val_pred)
    test_scores = metrics_module.score_all(problem, data.y[data.test_idx], test_pred)
    names = list(best)
    extra = extra or {}
    used = [i for i in range(len(names)) if weights[i] > 0]  # a member at weight 0 is not saved with it
    every = {**predictors, **extra}
    predictors["ensemble"] = EnsemblePredictor("ensemble", [every[names[i]] for i in used],
                                               [float(weights[i]) for i in used], problem, data.classes)
    test_seconds = ensemble_seconds([seconds[n] for n in names], weights)
    row = leaderboard_row(
        "ensemble", val_scores, test_scores, fit_seconds=selection_seconds, predict_seconds=0.0,
        test_rows_per_s=rows_per_second(len(data.test_idx), test_seconds), device="cpu",
        num_folds=min(len(t.folds) for t in trials), best_trial="-",
        params=dict(zip(names, map(float, weights))), level=level,
    )
    return row, (held, val_pred, test_pred)


def _searched_or_floor(y, members: list, searched, floor, metric, noise_guard: bool):
    """The searched selection's weights where they beat the floor's on the held-out rows (with `noise_guard`,
    by more than the rows' noise: one standard error of the gain, and the run says which it kept), else the
    floor's."""
    from pipeline.ensemble import blend, clear_gain

    ours, theirs = blend(members, searched), blend(members, floor)
    if not noise_guard:
        return floor if metric.loss(y, ours) > metric.loss(y, theirs) else searched
    beats, gain, noise = clear_gain(y, ours, theirs, metric)
    if beats:
        log.info("ensemble: the searched trials' selection kept: %s %.4g on the held-out rows against %.4g for "
                 "the default run's, a gain over one standard error (%.2g)", metric.name,
                 metric(y, ours), metric(y, theirs), noise)
        return searched
    if not gain > 0:
        return floor
    log.info("ensemble: the default run's selection kept (each model's own params): the searched trials' "
             "scored %s %.4g against %.4g on the held-out rows, a gain within one standard error of the "
             "rows' noise (%.2g)",
             metric.name, metric(y, ours), metric(y, theirs), noise)
    return floor
