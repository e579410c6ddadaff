"""How a time budget is spent: with `time_limit_s` given and no `hpo` chosen, the run searches with
hpo=auto (each model's own params, then its kind's portfolio of proven configurations, then TPE with
pruning: pipeline.searchers.AutoSearch) for as many trials as the budget lets finish; hpo=auto without
a limit is refused, since nothing would end its trials."""

from __future__ import annotations

import dataclasses
import logging

from pipeline.components import HpoConf
from pipeline.errors import ConfigError
from pipeline.settings import Settings

log = logging.getLogger("pipeline")

AUTO = "pipeline.searchers.AutoSearch"


def search_for_budget(settings: Settings, overrides: tuple[str, ...]) -> Settings:
    """`settings`, with hpo=auto when time_limit_s is set and the user chose no hpo (said on the terminal)."""
    from pipeline.searchers import AutoSearch

    conf = settings.conf
    limited = conf.time_limit_s is not None or conf.fit_time_limit_s is not None
    if isinstance(conf.hpo.make_searcher(), AutoSearch) and not limited:
        raise ConfigError("hpo=auto searches for as long as a time budget allows: set time_limit_s (e.g. "
                          "time_limit_s=60), or choose hpo=tpe or hpo=random with hpo.num_trials")
    chosen = any(o.lstrip("+~").split("=")[0].split(".")[0] == "hpo" for o in overrides)
    if conf.time_limit_s is None or chosen or conf.hpo._target_ != "pipeline.searchers.NoSearch" \
            or conf.hpo.num_trials != 1:
        return settings
    empty = [s.name for s in settings.models if not s.search_space]
    if empty:
        log.warning("time_limit_s is set but model(s) %s have no search_space: hpo stays none", ", ".join(empty))
        return settings
    hpo = HpoConf(num_trials=1000, seed=conf.hpo.seed, start_from_defaults=True, pruning=True, _target_=AUTO)
    from pipeline import report

    report.console.print(
        f"hpo=auto: time_limit_s={conf.time_limit_s:g} is set and no hpo was chosen, so each model fits its own "
        "params, then its kind's proven configurations, then a TPE search with pruning, for as many trials as "
        "finish in time (hpo=none: one trial of each model's own params)", highlight=False)
    params = dict(settings.params)
    for key, value in (("hpo._target_", AUTO), ("hpo.num_trials", 1000), ("hpo.pruning", True)):
        if key in params:
            params[key] = value
    return dataclasses.replace(settings, conf=dataclasses.replace(conf, hpo=hpo), params=params)
