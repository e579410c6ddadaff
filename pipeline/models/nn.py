"""A PyTorch MLP with categorical embeddings, trained by pipeline.nn's device-resident loop."""

from __future__ import annotations

from pathlib import Path

from pipeline.label_range import label_range, within
from pipeline.models import memory
from pipeline.models.base import FitContext, TabularModel
from pipeline.models.profile import ModelProfile
from pipeline.nn.options import DEFAULTS, LoopConfig, check, check_precision
from pipeline.resources import Resources


PROFILE = ModelProfile(
    library="PyTorch",
    accelerators=frozenset({"cpu", "cuda", "rocm", "mps"}),
    modules=("torch",),
    distributions=(("torch",),),
    fit_imports=("torch._dynamo",),  # the optimizer imports it on first use: a second of a worker's first fit
    memory=memory.network,
    import_bytes=memory.TORCH_IMPORT_BYTES,
    memory_hint="a smaller model.{name}.params.batch_size or hidden_sizes",
    max_gpus_per_fit=None,  # several whole GPUs train one network with DDP
    # A small MLP's CPU step gains little from a second thread: on Adult, 5 folds on 2 cores took 43.4 s one
    # at a time with 2 threads and 31.5 s two at once with 1 thread each, which this share reproduces.
    thread_serial_share=0.75,
    # On a GPU the training rows sit on the device and batches are gathered there: one thread launches
    # the kernels (the encoding of the frame before the loop is single-threaded pandas/numpy)
    gpu_fit_cpus=1,
    device_param="device",  # the device of a fit's ranks comes from its placement (Placement.device)
    costs=Path(__file__).with_name("nn_costs.yaml"),
    cost_name="network",
    portfolio=(
        # quantile-scaled numbers through periodic embeddings (Gorishniy et al.'s MLP-PLR): the network
        # draws the step-like functions of a column that trees find. On three splits each, its test score
        # against the plain network's: Computers RMSE 165 vs 193, Catsup accuracy 0.676 vs 0.624
        {"learning_rate": 1.0e-3, "dropout": 0.1, "weight_decay": 1.0e-5, "numeric_scaling": "quantile",
         "numeric_embedding": "periodic", "frequency_scale": 1.0},
        # AutoGluon's NN_TORCH defaults (lr 3e-4, dropout 0.1, weight decay 1e-6); a faster learner
        {"learning_rate": 3.0e-4, "dropout": 0.1, "weight_decay": 1.0e-6, "numeric_scaling": "standard",
         "numeric_embedding": "none", "frequency_scale": 1.0},
        {"learning_rate": 3.0e-3, "dropout": 0.2, "weight_decay": 1.0e-4, "numeric_scaling": "standard",
         "numeric_embedding": "none", "frequency_scale": 1.0},
    ),
    quick=(("max_epochs", 3),),
)


class TorchMLPModel(TabularModel):
    profile = PROFILE

    @classmethod
    def explicit_device(cls, params):
        device = str(params.get("device", "auto")).lower()
        return None if device == "auto" else (device, f"params.device={device}")

    @classmethod
    def fit_work(cls, params, fit):
        return fit.train * int({**DEFAULTS, **params}["max_epochs"]) / 1e6

    @classmethod
    def gpu_request(cls, params):
        device = str(params.get("device", "auto")).lower()
        return device in ("auto", "cuda"), device == "cuda", f"params.device={device}"

    @classmethod
    def check_params(cls, name, params, problem_type=None):
        check(params, f"model.{name}.params")

    @classmethod
    def check_placement(cls, name: str, params: dict, fit: Resources) -> None:
        """Checks that need the fit's resources: fp16 autocast needs a GPU."""
        p = {**DEFAULTS, **params}
        on_gpu = fit.num_gpus > 0 and str(p["device"]).lower() != "cpu"
        check_precision(p["precision"], on_gpu, f"model.{name}.params")

    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        self._train(X, None, y, X_val, None, y_val, ctx)

    def _fit_rows(self, X, y, train_rows, val_rows, ctx: FitContext) -> None:
        # the rows' numbers are gathered straight into the tensors' storage: no frame of them
        self._train(X, train_rows, y[train_rows], X, val_rows, y[val_rows], ctx)

    def _train(self, X, rows, y, X_val, val_rows, y_val, ctx: FitContext) -> None:
        """Fit on the rows at positions `rows` of X (all: None), validated on the rows `val_rows` of
        X_val; y and y_val are those rows' labels."""
        import numpy as np
        import torch

        from pipeline import metrics
        from pipeline.nn.encoding import TabularEncoder
        from pipeline.nn.loop import Arrays, Loop, to_prediction
        from pipeline.nn.network import NetSpec

        config = LoopConfig.from_params(self.params, f"model.{self.name}.params")
        p = {**DEFAULTS, **self.params}
        torch.set_num_threads(ctx.placement.num_cpus)
        use_gpu = ctx.placement.local_gpus and p["device"] != "cpu"
        self.encoder_ = TabularEncoder(scaling=p["numeric_scaling"])
        regression = ctx.problem_type == "regression"
        self.y_scale_ = (float(np.mean(y)), float(np.std(y)) or 1.0) if regression else (0.0, 1.0)
        self.y_range_ = label_range(y, p["y_range_extend"]) if regression else None
        weights = [None if w is None else torch.as_tensor(w, dtype=torch.float32)
                   for w in ctx.row_weights(y, y_val)]
        arrays = Arrays(*self._tensors(self.encoder_.fit_transform(X, rows), y),
                        *self._tensors(self.encoder_.transform(X_val, val_rows), y_val), *weights)
        self.spec_ = NetSpec(
            num_numeric=len(self.encoder_.numeric),
            cardinalities=tuple(self.encoder_.cardinalities),
            out_dim=1 if regression else ctx.num_classes,
            hidden_sizes=tuple(p["hidden_sizes"]),
            dropout=float(p["dropout"]),
            max_embedding_dim=int(p["max_embedding_dim"]),
            numeric_embedding=p["numeric_embedding"],
            embedding_frequencies=int(p["embedding_frequencies"]),
            frequency_scale=float(p["frequency_scale"]),
            numeric_embedding_dim=int(p["numeric_embedding_dim"]),
        )
        metric = metrics.resolve(ctx.eval_metric, ctx.problem_type)
        world = len(ctx.placement.local_gpus) if use_gpu else 1
        if world > 1:
            from pipeline.nn.ddp import fit_distributed

            result = fit_distributed(
                ctx.placement.local_gpus, self.spec_, config, ctx.problem_type, metric, arrays, backend="nccl", seed=ctx.seed,
                checkpoint_dir=ctx.checkpoint_dir, y_scale=self.y_scale_, deadline=ctx.deadline,
                scored_after=ctx.scored_rows,
            )
        else:
            device = torch.device(ctx.placement.device if use_gpu else "cpu")
            loop = Loop(self.spec_, config, ctx.problem_type, metric, device, seed=ctx.seed,
                        checkpoint_dir=ctx.checkpoint_dir, y_scale=self.y_scale_, report=ctx.report,
                        deadline=ctx.deadline, scored_after=ctx.scored_rows)
            result = loop.run(arrays)
        ctx.stopped_by_budget = ctx.stopped_by_budget or result.stopped_by_budget
        self.device_ = ctx.placement.device if use_gpu else "cpu"
        self.state_dict_ = result.state_dict
        self.history_ = result.history
        self.best_epoch_ = result.best_epoch
        self.batch_size_ = result.batch_size
        self.oom_backoffs_ = result.oom_backoffs
        self.world_size_ = world
        self.module_ = None
        if world == 1 and config.precision == "32" and result.validation_output is not None:
            # the outputs that chose the best epoch are those of the kept weights, computed as _predict does
            raw = to_prediction(result.validation_output, ctx.problem_type, self.y_scale_)
            self.validation_raw_ = within(raw, self.y_range_)

    def _tensors(self, encoded, y):
        import numpy as np
        import torch

        num, cat = encoded
        if self.problem_type_ == "regression":
            target = torch.as_tensor((np.asarray(y, dtype=np.float64) - self.y_scale_[0]) / self.y_scale_[1], dtype=torch.float32)
        else:
            target = torch.as_tensor(np.asarray(y), dtype=torch.long)
        return torch.from_numpy(num), torch.from_numpy(cat), target

    def _module(self):
        import torch

        if self.module_ is None:
            module = self.spec_.build()
            module.load_state_dict(self.state_dict_)
            device = self.device_ if (self.device_.startswith("cuda") and torch.cuda.is_available()) else "cpu"
            self.module_ = module.to(device).eval()
        return self.module_

    def _predict(self, X):
        import torch

        from pipeline.nn.loop import to_prediction
        from pipeline.nn.options import EVAL_BATCH

        module = self._module()
        device = next(module.parameters()).device
        num, cat = self.encoder_.transform(X)
        outs = []
        with torch.no_grad():
            for start in range(0, len(num), EVAL_BATCH):
                xb = torch.from_numpy(num[start : start + EVAL_BATCH]).to(device)
                cb = torch.from_numpy(cat[start : start + EVAL_BATCH]).to(device)
                outs.append(module(xb, cb).float())
        out = torch.cat(outs) if outs else torch.empty(0, self.spec_.out_dim)
        return within(to_prediction(out, self.problem_type_, self.y_scale_), getattr(self, "y_range_", None))

    def place(self, device: str, num_cpus: int) -> None:
        import torch

        super().place(device, num_cpus)
        torch.set_num_threads(num_cpus)
        self.device_, self.module_ = device, None

    def refit_params(self, fitted):
        import numpy as np

        epochs = max(1, round(float(np.mean([m.best_epoch_ + 1 for m in fitted]))))
        return {"max_epochs": epochs, "patience": 0}

    def refit_share(self):
        fitted = len(self.history_.get("val_loss", ()))  # an epoch each
        return (self.best_epoch_ + 1) / fitted if fitted > self.best_epoch_ >= 0 else 1.0

    def __getstate__(self):
        state = dict(self.__dict__)
        state["module_"] = None  # weights travel as the CPU state dict
        if "state_dict_" in state:
            state["state_dict_"] = {k: v.cpu() for k, v in state["state_dict_"].items()}
        return state
