"""What a tracker is: the calls a run makes, each doing nothing here (tracking=none).

A tracker of your own (`tracking._target_`) subclasses NullTracker and sets `enabled = True`.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Optional


class NullTracker(abc.ABC):
    """tracking=none: every call does nothing. (An ABC only so that a tracker forwarding its calls,
    pipeline.tracking.client.TrackerClient, can be registered as one without inheriting these no-ops.)"""

    enabled = False
    run_id: Optional[str] = None
    failure: Optional[str] = None

    def connect(self) -> None:
        """Reach the store before the run starts (called when `enabled`); raise TrackingError if it cannot."""

    def start(self, run_name: str, params: dict, tags: dict) -> None: ...

    def poll(self) -> Optional[str]:
        """The run's id if it has started, without waiting (None if not yet); TrackingError if it
        could not start."""
        return self.run_id

    def log_params(self, params: dict) -> None: ...

    def log_metrics(self, metrics: dict, step: Optional[int] = None) -> None: ...

    def log_history(self, prefix: str, history: dict[str, list[float]]) -> None: ...

    def set_tags(self, tags: dict) -> None: ...

    def log_artifact(self, path: Path, folder: Optional[str] = None) -> None: ...

    def log_predictor(self, name: str, predictor, example, metrics: Optional[dict] = None,
                      pickled: Optional[bytes] = None) -> Optional[str]:
        """Log a predictor as a model with its own `metrics` (`<name>/val_…`, `<name>/test_…`); its URI.
        `pickled`: the predictor's pickle as the run folder holds it, where a save made it."""

    def log_plots(self, run_dir: Path, data) -> None:
        """Draw the run's plots (`data`: pipeline.plots.RunPlots) into run_dir and log each as an
        artifact; nothing when not `enabled`. A tracker in a process of its own draws them there."""
        if not self.enabled:
            return
        from pipeline import plots

        for path in plots.draw(data, Path(run_dir)):
            self.log_artifact(path)

    def register_model(self, model_uri: str, name: str, alias: str) -> Optional[str]: ...

    def log_datasets(self, summary, locations: dict) -> None: ...

    def share_view(self, state: dict) -> None:
        """Make `state` (pipeline.tracking.view.view_state) the experiment's shared view in the UI."""

    def log_trial(self, name: str, params: dict, metrics: dict, tags: dict) -> None: ...

    def end(self, status: str) -> None: ...

    def closing_lines(self) -> list[str]:
        """What the console's last lines say of the run once it has ended: where to see it, the best model."""
        return []
