"""The fit node: one fold of one trial of one model, or one stacked model (a level's fold model, an
inner model, a refit: pipeline.graph.stacking), run by the backend on a worker.

A trial's request carries the trial's parameters (asked of the trial source when the fit starts),
the fold's seed and the cache key. A stacked fit's carries its kind's best level-1 parameters (with
the refit's length for a refit) and, above level 1, the features the level below predicted for it.
Its result joins the timeline and, for the pruner, the curves.
"""

from __future__ import annotations

from pipeline.graph.nodes import NodeKind, register
from pipeline.split import fold_scheme


@register
class FitNode(NodeKind):
    name = "fit"
    on_worker = True

    def request(self, task, shares, ctx, attempt: int):
        if task.fold_set is not None:
            return _stacked_request(task, shares, ctx)
        from pipeline.graph.tasks import FitRequest, task_key, task_seed

        params = ctx.trials.params(task.model, task.trial)
        prototype = ctx.prototypes[task.model]
        num_folds = ctx.plan.allocation(task.model).num_folds
        seed = task_seed(ctx.seed, task.model, task.trial, task.fold)
        key = task_key(ctx.data.fingerprint, prototype, params, task.fold, num_folds, ctx.seed, seed,
                       ctx.metric.name, ctx.pruning, device=_device_kind(prototype, params, shares),
                       class_weight=ctx.class_weight, scored_by=ctx.search_metric.name,
                       fold_scheme=fold_scheme(ctx.data.problem_type))
        return FitRequest(
            task_id=task.id, key=key, model=prototype, params=params, model_name=task.model,
            trial=task.trial, fold=task.fold, num_folds=num_folds, fold_seed=ctx.seed, seed=seed,
            eval_metric=ctx.metric.name, num_cpus=ctx.fit_threads(task, shares),
            gpu_ids=tuple(d for d, _ in shares), gpu_shares=tuple(s for _, s in shares), data=ctx.data_ref,
            checkpoint_dir=str(ctx.store.checkpoint_dir(key)), pruning=ctx.pruning,
            prune_thresholds=ctx.rung_thresholds(task.model, task.fold) if ctx.pruning else (),
            deadline=ctx.deadline, class_weight=ctx.class_weight,
        )

    def done(self, task, result, request, ctx):
        if result.curve:  # stopped fits too: judged only against the survivors, each rung would stop half
            ctx.rung_table(task.model, task.fold).add(result.curve)
        ctx.outcome.timeline.append(
            {
                "task": task.id, "model": task.model, "trial": task.trial, "fold": task.fold, "level": task.level,
                **({"fold_set": list(task.fold_set)} if task.fold_set is not None else {}),
                "start": result.start, "end": result.end, "pid": result.pid, "host": result.host,
                "node": result.node,
                "num_cpus": task.resources.num_cpus, "threads": request.num_cpus,  # fewer on a busy machine
                "device_ids": list(result.gpu_ids),
                "gpu_shares": [float(s) for s in request.gpu_shares],
                "cuda_visible_devices": result.cuda_visible_devices, "device": result.device,
                "nvml_devices": list(getattr(result, "nvml_devices", ())),  # () for a result kept before it was recorded
                "cached": result.cached, "attempt": result.attempt, "pruned": result.pruned,
                "stopped_by_budget": getattr(result, "stopped_by_budget", False),  # False: a result cached before it was kept
                **_memory(ctx.plan.allocation(task.model).memory, result, task.level),
            }
        )
        if ctx.hooks:
            ctx.hooks.on_task_end(task, result)
        return result

    def describe(self, tasks, plan) -> str:
        trials = sum(t.fold_set is None for t in tasks) + plan.unlisted_fits  # the trials the plan repeats too
        line = f"fit: {len(tasks) + plan.unlisted_fits} fit(s): {trials} per model × trial × fold"
        for level in range(1, plan.stack_levels + 2):
            inner = [t for t in tasks if t.level == level and t.inner]
            folds = [t for t in tasks if t.level == level and level > 1 and t.fold_set and len(t.fold_set) == 1]
            if folds:
                line += f"; level {level}: {len(folds)} fold model(s)"
            if inner:
                line += f"; {len(inner)} level-{level} model(s) without 2+ folds, for the features above"
        refits = sum(t.fold_set == () for t in tasks)
        if refits:
            line += f"; {refits} refit(s) on every row"
        return line + f"; in {plan.num_waves} wave(s)"


def stacked_result(ctx, model: str, level: int, fold_set: tuple[int, ...]):
    """The fold result of M(level, fold_set) of `model`: a fold of the best trial at level 1, else its fit."""
    from pipeline.graph.shape import stack_fit_id

    if level == 1 and len(fold_set) == 1:
        return ctx.outcome.best(model, ctx.search_metric).folds[fold_set[0]]
    return ctx.outcome.results[stack_fit_id(model, level, fold_set)]


def _stacked_request(task, shares, ctx):
    """M(task.level, task.fold_set): the best level-1 trial's parameters (a refit: for its level's mean
    early-stopped length), and above level 1 the features from the level below."""
    from pipeline.graph import stacking
    from pipeline.graph.tasks import FitRequest, StackFeatures, row_folds, task_key, task_seed

    best = ctx.outcome.best(task.model, ctx.search_metric)
    prototype = ctx.prototypes[task.model]
    params = dict(best.params)
    if task.fold_set == ():
        folds = ctx.outcome.best(stacking.level_name(task.model, task.level), ctx.search_metric).folds
        params.update(prototype.clone(params).refit_params([f.model for f in folds]))
    num_folds = ctx.plan.allocation(task.model).num_folds
    stack = None
    if task.level > 1:
        names, values = stacking.feature_matrix(
            task.fold_set, task.level, ctx.plan.stack_levels + 1, [a.model for a in ctx.plan.allocations],
            ctx.data, row_folds(ctx.data, num_folds, ctx.seed), num_folds,
            lambda model, level, fold_set: stacked_result(ctx, model, level, fold_set))
        stack = StackFeatures.of(names, values)
    seed = task_seed(ctx.seed, task.id, best.trial, -1)
    key = task_key(ctx.data.fingerprint, prototype, params, task.fold, num_folds, ctx.seed, seed, ctx.metric.name,
                   device=_device_kind(prototype, params, shares), fold_set=task.fold_set, stack=stack,
                   class_weight=ctx.class_weight, fold_scheme=fold_scheme(ctx.data.problem_type))
    return FitRequest(
        task_id=task.id, key=key, model=prototype, params=params, model_name=task.model, trial=best.trial,
        fold=task.fold, num_folds=num_folds, fold_seed=ctx.seed, seed=seed, eval_metric=ctx.metric.name,
        num_cpus=ctx.fit_threads(task, shares), gpu_ids=tuple(d for d, _ in shares),
        gpu_shares=tuple(s for _, s in shares),
        data=ctx.data_ref, checkpoint_dir=str(ctx.store.checkpoint_dir(key)), fold_set=task.fold_set, stack=stack,
        class_weight=ctx.class_weight,
    )


def _memory(memory, result, level: int) -> dict:
    """The fit's measured peaks beside the plan's estimate for its level, in MiB, for the timeline."""
    out = {"peak_ram_mb": round(result.peak_ram / 2**20, 1), "peak_gpu_mb": round(result.peak_gpu / 2**20, 1)}
    if memory is not None:
        estimate = memory.at(level)
        out.update(estimate_ram_mb=round(estimate.ram / 2**20, 1), estimate_gpu_mb=round(estimate.gpu / 2**20, 1))
    return out


def _device_kind(prototype, params: dict, shares) -> str:
    """"gpu" when this fit is given GPUs and its parameters let it use them, else "cpu"."""
    may_use_gpu = type(prototype).gpu_request({**prototype.params, **params})[0]
    return "gpu" if shares and may_use_gpu else "cpu"
