"""The network's training loop: data resident on the device, batches as index slices.

No DataLoader: the whole training table sits on the device as tensors and every batch is a
gather by a slice of a shuffled index. Mixed precision by autocast (a gradient scaler for fp16),
gradient accumulation, an optional torch.compile, a power-of-two batch-size search, out-of-memory
back-off, early stopping, a deadline read within epochs, a checkpoint per epoch, and DDP when
`world_size > 1` (the caller starts the process group; evaluation and checkpoints on rank 0)."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from pipeline.accelerators import for_torch
from pipeline.errors import HardwareError
from pipeline.metrics import Metric
from pipeline.nn.batch_size import find_batch_size, free_memory
from pipeline.nn.network import NetSpec, to_prediction  # noqa: F401  (importable from here too)
from pipeline.nn.options import (
    COMPILE_MODES, EVAL_BATCH, PRECISIONS, LoopConfig, activation_bytes, check_precision, embedding_floats,
    largest_batch, optimizer_options, scaled_lr, watched,
)
from pipeline.trusted import create_file, make_folders, open_trusted

log = logging.getLogger(__name__)
# steps between reads of the deadline under DDP, rank 0 deciding (one process reads it at every step)
DEADLINE_EVERY = 8


@dataclass
class Arrays:
    """CPU tensors of one fit: training rows, validation rows, their weights (None: each row weighs 1)."""

    x_num: torch.Tensor
    x_cat: torch.Tensor
    y: torch.Tensor
    v_num: torch.Tensor
    v_cat: torch.Tensor
    v_y: torch.Tensor
    w: Optional[torch.Tensor] = None
    v_w: Optional[torch.Tensor] = None


@dataclass
class LoopResult:
    state_dict: dict
    history: dict[str, list[float]] = field(default_factory=dict)
    best_epoch: int = -1
    best_score: float = float("nan")  # the eval metric at the kept epoch
    best_watched: float = float("inf")  # the monitored figure there, lower better; on resume, from the history
    batch_size: int = 0
    oom_backoffs: int = 0
    epochs_run: int = 0
    pruned: bool = False
    stopped_by_budget: bool = False  # stopped at an epoch's end: another epoch would end past the deadline
    validation_output: Optional[torch.Tensor] = None  # the network's outputs on the validation rows at the best epoch


class Loop:
    """One fit of the network on one device (a rank of DDP when world_size > 1)."""

    def __init__(
        self,
        spec: NetSpec,
        config: LoopConfig,
        problem_type: str,
        metric: Metric,
        device: torch.device,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        checkpoint_dir: Optional[Path] = None,
        y_scale: tuple[float, float] = (0.0, 1.0),
        report: Optional[Callable[[int, float], bool]] = None,
        deadline: Optional[float] = None,
        scored_after: int = 0,
    ):
        self.spec, self.cfg, self.problem_type, self.metric = spec, config, problem_type, metric
        self.device, self.seed, self.rank, self.world = device, seed, rank, world_size
        self.checkpoint_dir, self.y_scale = checkpoint_dir, y_scale
        # deadline: a time.time(); scored_after: rows predicted once the fit ends (the test rows), timed too
        self.report, self.deadline, self.scored_after = report, deadline, scored_after
        self.accelerator = for_torch(device)
        check_precision(config.precision, self.accelerator.fp16)
        dtype = PRECISIONS[config.precision]
        self.dtype: Optional[torch.dtype] = getattr(torch, dtype) if dtype else None

    # ------------------------------------------------------------------ setup
    def _loss(self, out: torch.Tensor, y: torch.Tensor, w: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The rows' mean loss; with weights `w`, of each row's loss times its weight (as GBMs weigh it)."""
        if self.problem_type == "regression":
            return getattr(nn.functional, f"{self.cfg.regression_loss}_loss")(out.float().squeeze(1), y)
        loss = nn.functional.cross_entropy(out.float(), y, reduction="mean" if w is None else "none")
        return loss if w is None else (loss * w).mean()

    def _autocast(self):
        return contextlib.nullcontext() if self.dtype is None else torch.autocast(self.device.type, dtype=self.dtype)

    def _to_device(self, a: Arrays) -> tuple:
        d = self.device
        return tuple(None if t is None else t.to(d, non_blocking=True)
                     for t in (a.x_num, a.x_cat, a.y, a.v_num, a.v_cat, a.v_y, a.w, a.v_w))

    # ------------------------------------------------------------------ run
    def run(self, arrays: Arrays) -> LoopResult:
        torch.manual_seed(self.seed)
        module = self.spec.build().to(self.device)
        x_num, x_cat, y, v_num, v_cat, v_y, w, v_w = self._to_device(arrays)
        self._scored_rows = len(v_y) + self.scored_after  # what the deadline keeps time for (`_out_of_time`)
        n = len(y)
        state = self._load_checkpoint()
        if state is not None:
            module.load_state_dict(state["model"])
        batch = self._batch_size(module, x_num, x_cat, y, state)
        model: nn.Module = module
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(module, device_ids=self.accelerator.ddp_device_ids(self.device))
        if self.cfg.compile:
            model = torch.compile(model, mode=COMPILE_MODES[self.cfg.compile])
        lr = scaled_lr(self.cfg.learning_rate, self.world, self.cfg.lr_scaling)
        optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=self.cfg.weight_decay,
                                      **optimizer_options(self.accelerator.fused_optimizer))
        scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype is torch.float16)
        generator = torch.Generator().manual_seed(self.seed)
        result = LoopResult(state_dict={}, batch_size=batch)
        best_state, bad_epochs, start_epoch = None, 0, 0
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            generator.set_state(state["generator"])
            torch.set_rng_state(state["torch_rng"])
            self.accelerator.set_rng_state(state.get("device_rng", state.get("cuda_rng")), self.device)
            best_state, bad_epochs, start_epoch = state["best_state"], state["bad_epochs"], state["epoch"] + 1
            result.history, result.best_epoch, result.best_score = state["history"], state["best_epoch"], state["best_score"]
            result.best_watched = watched(self.cfg.monitor, result.history["val_loss"][result.best_epoch],
                                          result.best_score, self.metric.greater_is_better)
            result.oom_backoffs = state["oom_backoffs"]
            log.info("resuming the network fit from its checkpoint after epoch %d", state["epoch"])
        self.accelerator.reset_peak_memory(self.device)

        for epoch in range(start_epoch, self.cfg.max_epochs):
            model.train()
            epoch_start = time.time()
            perm = torch.randperm(n, generator=generator).to(self.device)
            t0 = time.perf_counter()
            loss_sum, rows, batch = self._epoch(model, optimizer, scaler, perm, x_num, x_cat, y, w, batch,
                                                result)
            self.accelerator.synchronize(self.device)
            seconds = time.perf_counter() - t0
            stop = torch.zeros(1, device=self.device)
            if self.rank == 0:
                val_loss, score, output = self._evaluate(module, v_num, v_cat, v_y, v_w)
                figure = watched(self.cfg.monitor, val_loss, score, self.metric.greater_is_better)
                if result.best_epoch < 0 or figure < result.best_watched:
                    best_state = {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
                    result.best_epoch, result.best_score, result.best_watched, bad_epochs = epoch, score, figure, 0
                    result.validation_output = output
                else:
                    bad_epochs += 1
                h = result.history
                for key, value in (
                    ("train_loss", (loss_sum / max(rows, 1)).item()),
                    ("val_loss", val_loss),
                    (f"val_{self.metric.name}", score),
                    ("lr", optimizer.param_groups[0]["lr"]),
                    ("rows_per_second", rows * self.world / max(seconds, 1e-9)),
                    ("batch_size", float(batch)),
                    ("peak_gpu_memory_mb", self._peak_memory_mb()),
                ):
                    if value is not None:  # a GPU figure only where the fit had a GPU
                        h.setdefault(key, []).append(float(value))
                if bad_epochs >= self.cfg.patience_at(result.best_epoch):
                    stop[0] = 1
                if self.report is not None and self.report(epoch, -score if self.metric.greater_is_better else score):
                    stop[0] = 2
                now = time.time()
                spent = now - epoch_start
                if not stop.item() and self.deadline is not None and (
                        now + spent + self._scoring_seconds(spent, rows) >= self.deadline):
                    stop[0] = 3  # the next epoch, as long as this one, would end past the deadline
            if self.world > 1:
                import torch.distributed as dist

                dist.broadcast(stop, src=0)
            result.epochs_run = epoch + 1
            if self.rank == 0:
                self._save_checkpoint(epoch, module, optimizer, scaler, generator, best_state, bad_epochs, batch, result)
            if stop.item() > 0:
                result.pruned, result.stopped_by_budget = stop.item() == 2, stop.item() == 3
                break
        result.state_dict = best_state if best_state is not None else module.state_dict()
        result.batch_size = batch
        if result.validation_output is not None:
            result.validation_output = result.validation_output.cpu()
        return result

    def _epoch(self, model, optimizer, scaler, perm, x_num, x_cat, y, w, batch, result):
        n = len(perm)
        acc = self.cfg.accumulate_grad_batches
        loss_sum = torch.zeros((), device=self.device)
        rows, pos, step, since = 0, 0, 0, None
        optimizer.zero_grad(set_to_none=True)
        while pos < n:
            end = pos + batch * self.world
            if self.world > 1 and end > n:
                break  # every rank needs a full share: drop the trailing partial global batch
            idx = perm[pos:end]
            if self.world > 1:
                idx = idx[self.rank * batch : (self.rank + 1) * batch]
            try:
                loss = self._step(model, optimizer, scaler, idx, x_num, x_cat, y, step, w)
            except torch.OutOfMemoryError:
                batch = self._back_off(batch, optimizer, result)
                continue  # retry the same rows with the smaller batch
            loss_sum += loss * len(idx)
            rows += len(idx)
            pos, step = end, step + 1
            since = since or (time.time(), rows)  # the pace is read from the second step: the first warms up
            if self._out_of_time(step, rows, since):
                break  # an epoch longer than the time left: the epoch's end stops the fit (stopped_by_budget)
        if step % acc:
            self._optimizer_step(optimizer, scaler)
        return loss_sum, rows, batch

    def _scoring_seconds(self, seconds: float, rows: int) -> float:
        """The time the epoch's evaluation and the test rows' predictions take: half of training on as many
        rows at `rows` per `seconds` (2M of each took 7.3 s after 8M x 20 trained at 205,000 rows/s: 0.37)."""
        return 0.5 * self._scored_rows * seconds / max(rows, 1)

    def _out_of_time(self, step: int, rows: int, since: tuple[float, int]) -> bool:
        """Within an epoch (`rows` trained so far, `since`: the time and rows at its first step's end):
        whether the deadline, less the scoring's time, has passed; under DDP every DEADLINE_EVERY steps,
        rank 0's clock deciding for all."""
        if self.deadline is None or (self.world > 1 and step % DEADLINE_EVERY):
            return False
        now, (began, before) = time.time(), since
        scoring = self._scoring_seconds(now - began, rows - before) if rows > before else 0.0
        past = now + scoring >= self.deadline
        if self.world > 1:
            import torch.distributed as dist

            flag = torch.tensor([float(past)], device=self.device)
            dist.broadcast(flag, src=0)
            past = bool(flag.item())
        return past

    def _step(self, model, optimizer, scaler, idx, x_num, x_cat, y, step, w=None):
        acc = self.cfg.accumulate_grad_batches
        boundary = (step + 1) % acc == 0
        sync = model.no_sync() if self.world > 1 and not boundary and hasattr(model, "no_sync") else contextlib.nullcontext()
        with sync:
            with self._autocast():
                out = model(x_num[idx], x_cat[idx])
            loss = self._loss(out, y[idx], None if w is None else w[idx])
            scaler.scale(loss / acc).backward()
        if boundary:
            self._optimizer_step(optimizer, scaler)
        return loss.detach()

    @staticmethod
    def _optimizer_step(optimizer, scaler) -> None:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def _back_off(self, batch: int, optimizer, result: LoopResult) -> int:
        label = self.accelerator.label
        if self.world > 1:
            raise HardwareError(
                f"{label} ran out of memory at batch_size={batch} per device under DDP; ranks cannot halve "
                "their batch independently, so set a smaller params.batch_size (or batch_size=auto)"
            )
        optimizer.zero_grad(set_to_none=True)
        free_memory(self.device)
        if batch <= 1:
            raise HardwareError(f"{label} ran out of memory with a batch of 1 row; the network does not fit "
                                "on the device")
        result.oom_backoffs += 1
        log.warning("%s out of memory at batch_size=%d: halving it to %d and continuing",
                    label, batch, batch // 2)
        return batch // 2

    def _batch_size(self, module, x_num, x_cat, y, state) -> int:
        if state is not None:
            return int(state["batch_size"])
        if self.cfg.batch_size != "auto":
            return self.cfg.batch_for(len(y))
        cap = max(1, min(self.cfg.max_batch_size, len(y)))
        found = find_batch_size(
            module, lambda b: self._probe(module, b, x_num, x_cat, y), len(y), self.cfg.max_batch_size, self.device,
            start=self._estimated_batch(module, cap),
        )
        if self.world > 1:
            import torch.distributed as dist

            t = torch.tensor([found], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            found = int(t.item())
        log.info("batch_size=auto chose %d rows per device", found)
        return found

    def _estimated_batch(self, module, cap: int) -> int:
        """Where the batch search starts: the largest power of two whose activations, as the plan's
        memory estimate counts them, fit in the memory left on the device (or a quarter of the free RAM)."""
        per_row = activation_bytes(module.input_width, self.spec.hidden_sizes, len(self.spec.cardinalities),
                                   embedding_floats(self.spec.num_numeric, vars(self.spec)))
        state = 3 * 4 * sum(p.numel() for p in module.parameters())  # gradients and AdamW's moments, still to come
        free = self.accelerator.free_memory(self.device)
        if free is not None:
            budget = int(0.8 * free) - state
        else:
            import psutil

            budget = psutil.virtual_memory().available // 4 - state
        return largest_batch(per_row, budget, cap)

    def _probe(self, module, batch, x_num, x_cat, y):
        idx = torch.arange(min(batch, len(y)), device=self.device)
        with self._autocast():
            out = module(x_num[idx], x_cat[idx])
        self._loss(out, y[idx]).backward()
        module.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _predict_raw(self, module, v_num, v_cat) -> torch.Tensor:
        module.eval()
        outs = []
        for start in range(0, len(v_num), EVAL_BATCH):
            with self._autocast():
                outs.append(module(v_num[start : start + EVAL_BATCH], v_cat[start : start + EVAL_BATCH]).float())
        module.train()
        return torch.cat(outs) if outs else torch.empty(0, self.spec.out_dim, device=self.device)

    def _evaluate(self, module, v_num, v_cat, v_y, v_w=None) -> tuple[float, float, torch.Tensor]:
        """Validation loss (weighted as training's), unweighted score and the outputs they come from."""
        out = self._predict_raw(module, v_num, v_cat)
        val_loss = self._loss(out, v_y, v_w).item()
        pred = to_prediction(out, self.problem_type, self.y_scale)
        truth = v_y.cpu().numpy()
        if self.problem_type == "regression":
            truth = truth * self.y_scale[1] + self.y_scale[0]
        return val_loss, self.metric(truth, pred), out

    def _peak_memory_mb(self) -> Optional[float]:
        peak = self.accelerator.peak_memory(self.device)
        return None if peak is None else peak / 2**20

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_path(self) -> Optional[Path]:
        return self.checkpoint_dir / "last.pt" if self.checkpoint_dir is not None else None

    def _load_checkpoint(self) -> Optional[dict]:
        """The last checkpoint, if any: tensors and plain values only (weights_only), from a file that
        passes pipeline.trusted's checks (UntrustedFile otherwise)."""
        path = self._checkpoint_path()
        if path is None or not os.path.lexists(path):
            return None
        with open_trusted(path) as fh:
            return torch.load(fh, map_location=self.device, weights_only=True)

    def _save_checkpoint(self, epoch, module, optimizer, scaler, generator, best_state, bad_epochs, batch, result):
        path = self._checkpoint_path()
        if path is None:
            return
        make_folders(path.parent)
        state = {
            "epoch": epoch,
            "model": module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "generator": generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "device_rng": self.accelerator.rng_state(self.device),
            "best_state": best_state,
            "best_epoch": result.best_epoch,
            "best_score": result.best_score,
            "bad_epochs": bad_epochs,
            "batch_size": batch,
            "history": copy.deepcopy(result.history),
            "oom_backoffs": result.oom_backoffs,
        }
        from pipeline.store import temporary_name

        tmp = temporary_name(path)
        with create_file(tmp) as fh:
            torch.save(state, fh)
        os.replace(tmp, path)
