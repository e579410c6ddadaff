"""The network's loop: DDP equals one process on the same global batch, accumulation, precision,
the batch-size search, OOM back-off and resumable checkpoints, all on the CPU (gloo)."""

import math

import numpy as np
import pytest
import torch

from pipeline.errors import ConfigError, HardwareError
from pipeline.metrics import METRICS
from pipeline.nn import loop as loop_module
from pipeline.nn.ddp import fit_distributed
from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec, find_batch_size, scaled_lr
from pipeline.nn.network import TabularMLP

CPU = torch.device("cpu")
ACC = METRICS["accuracy"]


def arrays(n=512, seed=0) -> Arrays:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    c = torch.randint(0, 5, (n, 2), generator=g)
    y = ((x[:, 0] + (c[:, 0] == 2).float()) > 0.3).long()
    return Arrays(x, c, y, x[:128].clone(), c[:128].clone(), y[:128].clone())


SPEC = NetSpec(num_numeric=6, cardinalities=(5, 5), out_dim=2, hidden_sizes=(32, 16), dropout=0.0, max_embedding_dim=4)


def run(config: LoopConfig, data=None, **kwargs):
    return Loop(SPEC, config, "binary", ACC, CPU, seed=3, **kwargs).run(data or arrays())


def assert_same_weights(a: dict, b: dict, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-4, msg=k)


def _listening_addresses(stop, found, before):
    """Poll the children this process started after `before` (the DDP ranks, not the worker servers
    earlier tests left running) for listening sockets while DDP runs."""
    import psutil

    me = psutil.Process()
    while not stop.is_set():
        for child in me.children(recursive=True):
            if child.pid in before:
                continue
            try:
                found.update(c.laddr.ip for c in child.net_connections("inet") if c.status == psutil.CONN_LISTEN)
            except psutil.Error:
                continue
        stop.wait(0.05)


def test_ddp_on_gloo_matches_one_process_on_the_same_global_batch():
    """2 ranks x 64 rows, gradients averaged by DDP == 1 process x 128 rows, after 8 optimizer steps.
    The ranks listen on the loopback interface only."""
    import threading

    import psutil

    base = dict(max_epochs=2, patience=0, learning_rate=0.01, lr_scaling="none", batch_size_by_rows=False)
    single = run(LoopConfig(batch_size=128, **base))
    stop, found = threading.Event(), set()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    watcher = threading.Thread(target=_listening_addresses, args=(stop, found, before))
    watcher.start()
    try:
        ddp = fit_distributed((0, 1), SPEC, LoopConfig(batch_size=64, **base), "binary", ACC, arrays(), backend="gloo",
                              seed=3)
    finally:
        stop.set()
        watcher.join()
    assert found and found <= {"127.0.0.1"}
    assert single.best_epoch == ddp.best_epoch
    assert_same_weights(single.state_dict, ddp.state_dict)
    assert ddp.history["rows_per_second"][0] > 0
    assert len(ddp.history["val_loss"]) == 2  # evaluated on rank 0 only, once per epoch


def test_ddp_ranks_stop_together_within_an_epoch_past_the_deadline():
    """Under DDP rank 0's clock decides, every DEADLINE_EVERY steps, for every rank (one rank leaving the
    epoch alone would leave the others waiting in their gradients' all-reduce): a deadline already past
    stops both ranks in the first epoch, and the fit ends stopped by the budget."""
    import time

    from pipeline.nn import loop as loop_module

    assert 512 // (2 * 8) > loop_module.DEADLINE_EVERY  # steps per epoch: the stop comes within it
    ddp = fit_distributed((0, 1), SPEC, LoopConfig(batch_size=8, max_epochs=5, patience=0), "binary", ACC,
                          arrays(), backend="gloo", seed=3, deadline=time.time() - 1.0)
    assert ddp.epochs_run == 1 and ddp.stopped_by_budget and ddp.state_dict


def test_ddp_scales_the_learning_rate():
    assert scaled_lr(1e-3, 4, "linear") == pytest.approx(4e-3)
    assert scaled_lr(1e-3, 4, "sqrt") == pytest.approx(2e-3)
    assert scaled_lr(1e-3, 4, "none") == pytest.approx(1e-3)
    with pytest.raises(ConfigError, match="lr_scaling"):
        scaled_lr(1e-3, 2, "cubic")


def test_gradient_accumulation_equals_the_larger_batch():
    base = dict(max_epochs=2, patience=0, learning_rate=0.01, batch_size_by_rows=False)
    big = run(LoopConfig(batch_size=128, **base))
    accumulated = run(LoopConfig(batch_size=64, accumulate_grad_batches=2, **base))
    assert_same_weights(big.state_dict, accumulated.state_dict)


def test_bf16_autocast_on_cpu_trains():
    result = run(LoopConfig(batch_size=64, max_epochs=3, patience=0, precision="bf16-mixed", learning_rate=0.01))
    losses = result.history["train_loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert result.best_score > 0.6


def test_the_batch_is_sized_from_a_small_tables_rows_and_batch_size_is_its_ceiling():
    """AutoGluon's rule under 100,000 training rows: 2 ** (2 + the rows' digits); from there batch_size."""
    from pipeline.nn.options import SMALL_TABLE_ROWS, rows_batch

    assert [rows_batch(n, 512) for n in (1, 99, 100, 364, 999, 1_000, 9_999, 10_000, 99_999)] == \
        [8, 16, 32, 32, 32, 64, 64, 128, 128]
    assert rows_batch(SMALL_TABLE_ROWS, 512) == 512 and rows_batch(2_000_000, 4096) == 4096
    assert rows_batch(364, 16) == 16  # never above the configured batch
    with pytest.raises(ConfigError, match="batch_size_by_rows='yes' must be true or false"):
        LoopConfig(batch_size_by_rows="yes")


def test_a_fit_on_few_rows_takes_many_steps_an_epoch_and_says_its_batch_once(caplog, monkeypatch):
    """512 rows at the default 512 a batch were one optimizer step an epoch; by rows they are 32 a batch,
    16 steps, said once a run however many fits take it (a search's hundreds of folds said it each).
    batch_size_by_rows=false keeps the configured batch."""
    import logging

    monkeypatch.setattr("pipeline.said_once._said", set())
    base = dict(max_epochs=1, patience=0)
    with caplog.at_level(logging.INFO, logger="pipeline.nn.options"):
        assert run(LoopConfig(**base)).batch_size == 32
        assert run(LoopConfig(**base)).batch_size == 32
    said = "batch_size=32 for 512 training rows (batch_size_by_rows: batch_size=512 is the ceiling"
    assert caplog.text.count(said) == 1
    monkeypatch.setattr("pipeline.run_clock._runs", 7)  # the next job of a sweep run in this process
    with caplog.at_level(logging.INFO, logger="pipeline.nn.options"):
        run(LoopConfig(**base))
    assert caplog.text.count(said) == 2
    assert run(LoopConfig(batch_size_by_rows=False, **base)).batch_size == 512


def test_fp16_on_cpu_is_a_clear_error():
    with pytest.raises(ConfigError, match="precision=16-mixed needs a CUDA device.*on the CPU use precision=bf16-mixed"):
        run(LoopConfig(precision="16-mixed"))


@pytest.mark.parametrize("monitor", ["val_loss", "eval_metric"])
def test_early_stopping_keeps_the_best_epoch(monitor):
    result = run(LoopConfig(batch_size=32, max_epochs=40, patience=2, patience_growth=0.0, learning_rate=0.05,
                            monitor=monitor))
    assert result.epochs_run < 40
    assert result.epochs_run - 1 - result.best_epoch == 2
    losses, accuracy = result.history["val_loss"], result.history["val_accuracy"]
    if monitor == "val_loss":
        assert result.best_epoch == losses.index(min(losses))
    else:
        assert result.best_epoch == accuracy.index(max(accuracy))
    assert result.best_score == accuracy[result.best_epoch]


def test_by_default_a_fit_waits_ten_epochs_past_its_best_and_the_model_group_says_the_same():
    """Five epochs without a lower validation loss are common on small tables before it falls again
    (README's Models): the default patience is ten, fixed (patience_growth 0), in the loop and in
    conf/model/nn.yaml."""
    from omegaconf import OmegaConf

    from tests.conftest import ROOT

    result = run(LoopConfig(batch_size=32, max_epochs=80, learning_rate=0.05))
    assert result.epochs_run < 80
    assert result.epochs_run - 1 - result.best_epoch == 10
    params = OmegaConf.load(ROOT / "conf" / "model" / "nn.yaml").nn.params
    assert (params.patience, params.patience_growth) == (LoopConfig().patience, LoopConfig().patience_growth)


def test_auto_batch_size_on_cpu_is_capped():
    result = run(LoopConfig(batch_size="auto", max_batch_size=256, max_epochs=1))
    assert result.batch_size == 256


class OomAbove(TabularMLP):
    """Raises CUDA's out-of-memory error for training batches larger than `limit` rows."""

    limit = 32

    def forward(self, x_num, x_cat):
        if self.training and x_num.shape[0] > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return super().forward(x_num, x_cat)


@pytest.fixture
def oom_network(monkeypatch):
    def build(spec):
        return OomAbove(spec.num_numeric, list(spec.cardinalities), spec.out_dim, spec.hidden_sizes, spec.dropout,
                        spec.max_embedding_dim)

    monkeypatch.setattr(loop_module.NetSpec, "build", build)


def test_out_of_memory_halves_the_batch_and_continues(oom_network, caplog):
    result = run(LoopConfig(batch_size=128, batch_size_by_rows=False, max_epochs=2, patience=0))
    assert result.batch_size == 32
    assert result.oom_backoffs == 2
    assert result.history["batch_size"] == [32.0, 32.0]
    assert "halving it to 64" in caplog.text and "halving it to 32" in caplog.text
    assert result.epochs_run == 2


def test_out_of_memory_at_batch_one_is_an_error(oom_network, monkeypatch):
    monkeypatch.setattr(OomAbove, "limit", 0)
    with pytest.raises(HardwareError, match="batch of 1 row"):
        run(LoopConfig(batch_size=4, max_epochs=1))


def test_batch_search_stops_below_the_first_out_of_memory():
    limit = 300

    def probe(batch):
        if batch > limit:
            raise torch.OutOfMemoryError("simulated")

    module = torch.nn.Linear(2, 2)
    assert find_batch_size(module, probe, n_rows=100_000, max_batch=65_536, device=CPU) == 256
    assert find_batch_size(module, probe, n_rows=100, max_batch=65_536, device=CPU) == 100


def test_checkpoint_resumes_an_interrupted_fit(tmp_path):
    """A fit stopped after epoch 2 and resumed to 4 ends where an uninterrupted 4-epoch fit ends."""
    config = dict(batch_size=64, patience=0, learning_rate=0.01)
    data = arrays()
    first = run(LoopConfig(max_epochs=2, **config), data, checkpoint_dir=tmp_path)
    assert (tmp_path / "last.pt").exists() and first.epochs_run == 2
    resumed = run(LoopConfig(max_epochs=4, **config), data, checkpoint_dir=tmp_path)
    straight = run(LoopConfig(max_epochs=4, **config), data)
    assert_same_weights(resumed.state_dict, straight.state_dict, atol=1e-6)
    assert resumed.history["train_loss"] == pytest.approx(straight.history["train_loss"])
    assert resumed.epochs_run == 4
    assert resumed.best_epoch == straight.best_epoch


def test_batches_are_index_slices_of_device_tensors(monkeypatch):
    """No DataLoader: the loop gathers each batch from tensors that stay on the device."""
    import torch.utils.data as tud

    def forbidden(*args, **kwargs):
        raise AssertionError("the fast loop must not build a DataLoader")

    monkeypatch.setattr(tud, "DataLoader", forbidden)
    result = run(LoopConfig(batch_size=64, max_epochs=1))
    assert result.history["rows_per_second"][0] > 0


@pytest.mark.slow
def test_torch_compile_trains():
    result = run(LoopConfig(batch_size=64, max_epochs=2, patience=0, compile=True, learning_rate=0.01))
    assert np.isfinite(result.history["train_loss"]).all()
    assert result.history["train_loss"][1] < result.history["train_loss"][0]


def test_adamw_is_fused_on_cuda_and_on_the_cpu():
    """One kernel (CUDA) or one pass per parameter (CPU) updates the weights; the loop builds it so."""
    from pipeline.accelerators import REGISTRY
    from pipeline.nn.options import optimizer_options

    CUDA, CPU_ACC = REGISTRY["cuda"], REGISTRY["cpu"]
    assert optimizer_options(CUDA.fused_optimizer) == {"fused": True}
    assert optimizer_options(CPU_ACC.fused_optimizer) == {"fused": True}
    built = []
    real = torch.optim.AdamW

    class Spy(real):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("fused"))
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.optim, "AdamW", Spy)
        run(LoopConfig(batch_size=64, max_epochs=1))
    assert built == [True]


def test_cpu_dropout_draws_a_quarter_of_the_numbers_and_keeps_the_rate(monkeypatch):
    """The network's dropout on the CPU: no call to torch's own (a draw per unit), the units kept at
    the rate 1 - p and scaled by its inverse, the same mask from the same seed, identity in eval."""
    from torch.nn import functional as F

    from pipeline.nn.network import Dropout, TabularMLP

    layer = Dropout(0.25)
    x = torch.ones(1000, 400)
    real_dropout = F.dropout

    def per_unit_draws(*args, **kwargs):
        raise AssertionError("the CPU path must not draw one number per unit")

    monkeypatch.setattr(F, "dropout", per_unit_draws)
    torch.manual_seed(0)
    out = layer(x)
    assert torch.unique(out).tolist() == [0.0, pytest.approx(1 / 0.75)]
    assert (out > 0).float().mean().item() == pytest.approx(0.75, abs=0.005)  # 400,000 units: sd 0.0007
    torch.manual_seed(0)
    assert torch.equal(layer(x), out)
    assert not torch.equal(layer(x), out)  # the generator moved on
    y = x.clone().requires_grad_()
    torch.manual_seed(0)
    layer(y).sum().backward()
    assert torch.equal(y.grad, out)  # gradients pass where units were kept, scaled alike
    net = TabularMLP(3, [4], 2, dropout=0.1)
    assert [type(m) for m in net.mlp if "Dropout" in type(m).__name__] == [Dropout, Dropout]
    net(torch.randn(8, 3), torch.zeros(8, 1, dtype=torch.long))
    monkeypatch.setattr(F, "dropout", real_dropout)
    assert torch.equal(layer.eval()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))


@pytest.mark.parametrize("value, ok", [(True, True), (False, True), ("reduce-overhead", True),
                                       ("max-autotune", True), ("fast", False), (1, False)])
def test_compile_takes_torch_compiles_modes(value, ok):
    from pipeline.nn.options import check

    if ok:
        check({"compile": value})
    else:
        with pytest.raises(ConfigError, match="compile=.* must be false, true .*reduce-overhead"):
            check({"compile": value})
