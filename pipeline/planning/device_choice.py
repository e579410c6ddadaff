"""Each model's device: `model.<name>.device` is auto or an accelerator (pipeline.accelerators, which
checks it), planned as cpu or cuda; the library's parameters follow.

For `auto` the planner estimates one fit on the CPU (with the threads the fit would get there) and on
the GPU from the data's shape known before loading and the calibration (pipeline.fit_cost), and picks
the faster; without a GPU, a known shape or a measurement of the GPU learner it stays on the CPU. A
device parameter the user wrote into the model's params (LightGBM's device_type, XGBoost's and the
network's device) wins over the model's device, with a warning where the estimate says it loses.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Optional

from pipeline.errors import ConfigError


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # cpu | cuda
    reason: str


@dataclass(frozen=True)
class Estimate:
    cpu_s: float
    gpu_s: float
    cpu_threads: int
    gpu_learner: str  # "CUDA", "OpenCL"

    @property
    def faster(self) -> str:
        return "cuda" if self.gpu_s < self.cpu_s else "cpu"

    def says(self, device: str) -> str:
        cpu = f"{self.cpu_s:.1f} s on {self.cpu_threads} CPU thread{'s' if self.cpu_threads != 1 else ''}"
        gpu = f"{self.gpu_s:.1f} s on {self.gpu_learner}"
        return f"est. {gpu} vs {cpu}" if device == "cuda" else f"est. {cpu} vs {gpu}"


def estimate(cls, params: dict, fit, cpu_threads: int) -> Optional[Estimate]:
    """One fit's estimated seconds on the CPU and the GPU; None when the shape or a measurement is missing."""
    if fit is None:
        return None
    cpu_key, gpu_key, gpu_label = cls.cost_learners(params)
    cal = cls.profile.calibration()
    cpu, gpu = cal.learner(cpu_key), cal.learner(gpu_key)
    if cpu is None or gpu is None:
        return None
    work = cls.fit_work(params, fit)
    serial = cls.profile.thread_serial_share
    return Estimate(cpu.seconds(work, cpu_threads, serial), gpu.seconds(work), cpu_threads, gpu_label)


def choose(name: str, requested: str, cls, params: dict, fit, gpus: Fraction, cpu_threads: int,
           warn: Optional[Callable[[str], None]] = None) -> DeviceChoice:
    """The device of model `name` (class `cls`, library params `params`) configured with
    `model.<name>.device=requested`, on hardware with `gpus` GPUs; `fit`: a FitShape or None."""
    key = f"model.{name}.device"
    explicit = cls.explicit_device(params)
    est = estimate(cls, params, fit, cpu_threads) if gpus > 0 else None
    if explicit is not None:
        device, param = explicit
        said = f"; {est.says(device)}" if est is not None else ""
        if est is not None and est.faster != device and warn is not None:
            warn(f"model '{name}': model.{name}.{param} runs it on the {device.upper()}, but the estimate says "
                 f"{est.faster} is faster ({est.says(est.faster)}); drop the parameter to let {key} decide")
        return DeviceChoice(device, f"{device}: model.{name}.{param} set in params{said}")
    if requested == "cuda":
        if gpus == 0:
            raise ConfigError(f"{key}=cuda but the hardware has no GPU (hardware.num_gpus=0); on a box with GPUs "
                              f"add +hardware=1gpu, or set {key}=auto or cpu")
        return DeviceChoice("cuda", f"cuda: {key}=cuda")
    if requested == "cpu":
        return DeviceChoice("cpu", f"cpu: {key}=cpu")
    if gpus == 0:
        return DeviceChoice("cpu", "cpu: auto, and the hardware has no GPU")
    if fit is None:
        return DeviceChoice("cpu", "cpu: auto, but the data's size is unknown before loading it")
    if est is None:
        learner = cls.cost_learners(params)[1]
        where = cls.profile.costs_label
        return DeviceChoice("cpu", f"cpu: auto, and {learner} has no measured fit times ({where})")
    return DeviceChoice(est.faster, f"{est.faster}: {est.says(est.faster)}")


def model_device(spec, hardware, fit, allocate_needs, warn=None) -> DeviceChoice:
    """`choose` for a configured model (a pipeline.settings.ModelSpec) on the run's hardware. Its CPU
    estimate is for the threads the model's fit would get on the CPU: `allocate_needs(needs)` allocates
    the fit for a pipeline.resources.ModelNeeds."""
    import dataclasses

    cpu_threads = hardware.num_cpus
    if hardware.num_gpus > 0 and fit is not None:
        on_cpu = spec.cls.needs(spec.name, spec.on("cpu").params)
        cpu_threads = allocate_needs(dataclasses.replace(on_cpu, wants_gpu=False, requires_gpu=False)).fit.num_cpus
    return choose(spec.name, spec.conf.device, spec.cls, spec.all_params, fit, hardware.num_gpus, cpu_threads, warn)
