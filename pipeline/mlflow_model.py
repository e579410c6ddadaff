"""The MLflow pyfunc model of a fitted predictor, logged as code (MLflow's models-from-code).

MLflow loads this file and the pickled predictor artifact, so
`mlflow.pyfunc.load_model(uri).predict(frame)` returns labels (or values, for regression).
"""

from __future__ import annotations

import pickle

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel


class PipelinePredictor(PythonModel):
    def load_context(self, context) -> None:
        with open(context.artifacts["predictor"], "rb") as fh:
            self.predictor = pickle.load(fh)

    def predict(self, context, model_input: pd.DataFrame, params=None):
        return self.predictor.predict(model_input)


mlflow.models.set_model(PipelinePredictor())
