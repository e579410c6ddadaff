"""The checks a run makes before it acts, each once. The config's values were checked as the settings
were read (pipeline.config_checks); `check` then looks at the data's files and columns, the problem type
where it can be had without reading the table, the eval metric and every model's library parameters.
Planning checks GPU requests against the hardware, and, once the plan says where the first fit runs,
each model's library there (`check_environment`).

The composition root (`pipeline.run`) calls them in that order, in a dry run too; none starts a
process, pool, thread or connection, except the library probes of GPU models (a child process each,
which is the check).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pipeline.errors import HardwareError, ResourceError

log = logging.getLogger("pipeline")

if TYPE_CHECKING:
    from pipeline.metrics import Metric
    from pipeline.roles import Roles
    from pipeline.graph.plan import Plan
    from pipeline.settings import Settings


@dataclass(frozen=True)
class Checked:
    """What the checks before loading learnt: the problem type and the metric, when the label column could
    be read alone (a local file, a bundled or synthetic table) or the type is declared; else None, and
    loading checks the metric and the type-dependent parameters, before anything starts in the background."""

    problem_type: Optional[str] = None
    metric: Optional[Metric] = None
    roles: Optional[Roles] = None  # the columns' roles from the file's first rows (None: inferred at loading)


def check(settings: Settings, launch_dir: Path) -> Checked:
    """The data's files and columns, the eval metric and the models' parameters, before any work."""
    from pipeline import metrics
    from pipeline.data_sources import check_before_reading

    check_before_reading(settings.conf.data, launch_dir, settings.source)  # a missing file, before the plan
    problem_type = settings.source.problem_type(launch_dir)
    roles = _roles(settings, launch_dir, problem_type)
    check_class_weight(settings, problem_type)
    if problem_type is None:
        metrics.check_name(settings.conf.eval_metric)
        check_params(settings, None)
        return Checked(roles=roles)
    metric = metrics.resolve(settings.conf.eval_metric, problem_type)
    check_params(settings, problem_type)
    return Checked(problem_type, metric, roles)


def check_class_weight(settings: Settings, problem_type: Optional[str]) -> None:
    """data.class_weight weighs classes: a regression label has none (a ConfigError before any fit)."""
    from pipeline import class_weights

    class_weights.check(settings.conf.data.class_weight, problem_type)


def _roles(settings: Settings, launch_dir: Path, problem_type: Optional[str]):
    """The columns' roles from the file's first rows, where a local file has them (a leak is an error here
    with data.leak_check=error, before the plan)."""
    from pipeline.data import roles_before_reading

    return roles_before_reading(settings.conf.data, launch_dir, problem_type, settings.source)


def check_after_loading(settings: Settings, checked: Checked, problem_type: str) -> Metric:
    """The metric for the loaded data's problem type, and the parameters again only when the type was not
    known before loading (or the loaded rows tell another)."""
    from pipeline import metrics

    check_class_weight(settings, problem_type)
    if checked.metric is not None and checked.problem_type == problem_type:
        return checked.metric
    metric = metrics.resolve(settings.conf.eval_metric, problem_type)
    check_params(settings, problem_type)
    return metric


def chosen_by(metric: Metric, data, num_folds: int) -> Metric:
    """The metric the run chooses models by: the eval metric, or log loss where the eval metric is undefined
    on the rows models are chosen on, a holdout validation split of one class (ROC AUC ranks nothing there:
    every model scored NaN and no ensemble could be built), said. Bags choose on every training row."""
    import numpy as np

    from pipeline import metrics

    if num_folds > 1 or data.problem_type == "regression" or not len(data.val_idx):
        return metric
    y = data.y[data.val_idx]
    uniform = np.full((len(y), len(data.classes or ())), 1.0 / max(len(data.classes or ()), 1))
    if metric(y, uniform) == metric(y, uniform):  # defined (not NaN) on these rows
        return metric
    log.warning(
        "eval_metric %s is undefined on the %d validation rows (they hold one class): the models, trials and "
        "ensemble are chosen and ranked by log_loss; parallelism=bag5 chooses out of fold on every training "
        "row", metric.name, len(y))
    return metrics.METRICS["log_loss"]


def check_params(settings: Settings, problem_type: Optional[str]) -> None:
    """Every model's library parameters (a misspelt one is a ConfigError naming the closest)."""
    for spec in settings.models:
        spec.cls.check_params(spec.name, spec.all_params, problem_type)


def check_gpu_models(models, hardware) -> None:
    """Where the total has no GPU, one error naming every model (a pipeline.settings.ModelSpec) configured
    for one, and the overrides that would put them on the CPU."""
    if hardware.total.num_gpus:
        return
    asking = []
    for spec in models:
        needs = spec.cls.needs(spec.name, spec.params)
        if needs.requires_gpu:
            asking.append((spec.name, needs.gpu_param))
        elif spec.conf.device == "cuda" and spec.cls.explicit_device(spec.params) is None:
            asking.append((spec.name, "device=cuda"))
    if not asking:
        return
    named = ", ".join(f"{name} ({param})" for name, param in asking)
    fixes = " ".join(f"model.{name}.{param.partition('=')[0]}=cpu" for name, param in asking)
    one = len(asking) == 1
    raise ResourceError(
        f"{'model' if one else 'models'} {named} {'asks' if one else 'ask'} for a GPU, "
        f"but this run has none (hardware.num_gpus=0); on a box with GPUs add +hardware=1gpu, or run "
        f"{'it' if one else 'them'} on the CPU: {fixes}"
    )


def check_environment(models, plan: Plan, on_cluster: bool) -> None:
    """Probe each model's library (`models`: ModelSpecs on their planned devices) where its first fit will run
    (a GPU build), unless the fits run elsewhere."""
    if plan.hardware.planned_only or on_cluster:
        return
    reasons = {a.model: a.device_reason for a in plan.allocations}
    for spec in models:
        if spec.cls.needs(spec.name, spec.params).requires_gpu:
            try:
                spec.cls.check_environment(spec.name, spec.params, first_fit_env(plan, spec.name))
            except HardwareError as exc:  # say which setting put the model on the GPU, and the way off it
                raise HardwareError(f"{exc} It is on the GPU by {reasons.get(spec.name) or 'its params'}; "
                                    f"model.{spec.name}.device=cpu trains it on the CPU.") from None


def first_fit_env(plan: Plan, model: str) -> dict[str, str]:
    """The environment a worker of the model's first fit gets: a library probe runs there, not in the driver."""
    first = next(t for t in plan.fit_tasks if t.model == model)
    return plan.hardware.worker_env(first.device_ids)
