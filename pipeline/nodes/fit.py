"""The fit node: one fold of one trial of one model, run by the backend on a worker.

Its request carries the trial's parameters (asked of the trial source when the fit starts), the
fold's seed and the cache key; its result joins the timeline and, for the pruner, the curves.
"""

from __future__ import annotations

from pipeline.nodes import NodeKind, register


@register
class FitNode(NodeKind):
    name = "fit"
    on_worker = True

    def request(self, task, shares, ctx, attempt: int):
        from pipeline.executors.tasks import FitRequest, task_key, task_seed

        params = ctx.trials.params(task.model, task.trial)
        prototype = ctx.prototypes[task.model]
        num_folds = ctx.plan.allocation(task.model).num_folds
        seed = task_seed(ctx.seed, task.model, task.trial, task.fold)
        key = task_key(ctx.data.fingerprint, prototype, params, task.fold, num_folds, ctx.seed, seed,
                       ctx.metric.name, ctx.pruning, device=_device_kind(prototype, params, shares))
        return FitRequest(
            task_id=task.id, key=key, model=prototype, params=params, model_name=task.model,
            trial=task.trial, fold=task.fold, num_folds=num_folds, fold_seed=ctx.seed, seed=seed,
            eval_metric=ctx.metric.name, num_cpus=task.resources.num_cpus,
            gpu_ids=tuple(d for d, _ in shares), gpu_shares=tuple(s for _, s in shares), data=ctx.data_ref,
            checkpoint_dir=str(ctx.store.checkpoint_dir(key)), pruning=ctx.pruning,
            prune_reference=tuple(ctx.curves.get((task.model, task.fold), ())) if ctx.pruning else (),
            deadline=ctx.deadline,
        )

    def done(self, task, result, request, ctx):
        if result.curve and not result.pruned:
            ctx.curves.setdefault((task.model, task.fold), []).append(result.curve)
        ctx.outcome.timeline.append(
            {
                "task": task.id, "model": task.model, "trial": task.trial, "fold": task.fold,
                "start": result.start, "end": result.end, "pid": result.pid, "host": result.host,
                "node": result.node,
                "num_cpus": request.num_cpus, "device_ids": list(result.gpu_ids),
                "gpu_shares": [float(s) for s in request.gpu_shares],
                "cuda_visible_devices": result.cuda_visible_devices, "device": result.device,
                "cached": result.cached, "attempt": result.attempt, "pruned": result.pruned,
                "stopped_by_budget": getattr(result, "stopped_by_budget", False),  # False: a result cached before it was kept
                **_memory(ctx.plan.allocation(task.model).memory, result),
            }
        )
        if ctx.hooks:
            ctx.hooks.on_task_end(task, result)
        return result

    def describe(self, tasks, plan) -> str:
        return f"fit: {len(tasks)} fit(s), one per model × trial × fold, in {plan.num_waves} wave(s)"


def _memory(memory, result) -> dict:
    """The fit's measured peaks beside the plan's estimate, in MiB, for the timeline."""
    out = {"peak_ram_mb": round(result.peak_ram / 2**20, 1), "peak_gpu_mb": round(result.peak_gpu / 2**20, 1)}
    if memory is not None:
        out.update(estimate_ram_mb=round(memory.estimate.ram / 2**20, 1),
                   estimate_gpu_mb=round(memory.estimate.gpu / 2**20, 1))
    return out


def _device_kind(prototype, params: dict, shares) -> str:
    """"gpu" when this fit is given GPUs and its parameters let it use them, else "cpu"."""
    may_use_gpu = type(prototype).gpu_request({**prototype.params, **params})[0]
    return "gpu" if shares and may_use_gpu else "cpu"
