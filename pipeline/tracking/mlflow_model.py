"""The MLflow pyfunc model of a fitted predictor, logged as code (MLflow's models-from-code).

MLflow loads this file and the pickled predictor artifact (the engine's own code ships with the
model), so `mlflow.pyfunc.load_model(uri).predict(frame)` returns labels (or values, for
regression) and `predict(frame, params={"predict_method": "predict_proba"})` returns one
probability column per class.
"""

from __future__ import annotations

import pickle

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

METHODS = ("predict", "predict_proba")


class PipelinePredictor(PythonModel):
    def load_context(self, context) -> None:
        from pipeline.trusted import open_trusted  # another user's (or a writable) pickle never runs

        with open_trusted(context.artifacts["predictor"]) as fh:
            self.predictor = pickle.load(fh)

    def predict(self, context, model_input: pd.DataFrame, params=None):
        method = (params or {}).get("predict_method", "predict")
        if method not in METHODS:
            raise ValueError(f"predict_method={method!r} is not one of {', '.join(METHODS)}")
        if method == "predict":
            return self.predictor.predict(model_input)
        proba = self.predictor.predict_proba(model_input)
        if self.predictor.problem_type == "regression":
            return proba
        return pd.DataFrame(proba, columns=[str(c) for c in self.predictor.classes], index=model_input.index)


mlflow.models.set_model(PipelinePredictor())
