"""Devices, precision and CPU threads for every part of storyeval that runs a model.

- :func:`resolve_device` turns ``cpu``, ``cuda``, ``cuda:1``, ``mps`` or ``auto`` into a
  device torch can use, and refuses a device this machine does not have with a clear error;
- :func:`check_precision` accepts ``float32`` everywhere, ``bfloat16`` on CPUs and GPUs that
  support it, ``float16`` on GPUs only;
- :func:`autocast` runs a block under that precision (matrix products in reduced precision,
  softmaxes in float32);
- :func:`configure_threads` chooses the number of torch threads from the CPUs that are free
  right now (or ``--threads``) and makes idle OpenMP threads sleep instead of spinning, so
  that a model never falls off the cliff of two spinning threads fighting a busy process for
  one core (a 2 x 80-token generation took 19 s instead of 6 s on a 2-core machine with one
  core busy);
- :func:`batch_scale` scales token budgets of batches to the device's free memory.

Examples
--------
>>> resolve_device("cpu"), check_precision("bfloat16", "cpu")
('cpu', 'bfloat16')
>>> check_precision("float16", "cpu")
Traceback (most recent call last):
...
storyeval.models.devices.DeviceError: precision float16 is not supported on cpu; use bfloat16 or float32
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, Literal

from storyeval.base.errors import StoryevalError
from storyeval.base.validation import check_choice

DEVICES = ("cpu", "cuda", "mps", "auto")
PRECISIONS = ("float32", "bfloat16", "float16")
Precision = Literal["float32", "bfloat16", "float16"]


class DeviceError(StoryevalError, ValueError):
    """A device or precision this machine cannot use."""


def resolve_device(name: str | None = "cpu") -> str:
    """The torch device for ``name``: ``cpu``, ``cuda`` (or ``cuda:N``), ``mps``, or ``auto``
    (the first GPU there is, else the CPU).

    Raises
    ------
    DeviceError
        For an unknown name or a device this machine does not have.
    """
    requested = (name or "cpu").strip().lower()
    kind = requested.split(":", 1)[0]
    if kind not in DEVICES or (":" in requested and kind != "cuda"):
        raise DeviceError(f"device must be one of cpu, cuda, cuda:N, mps, auto; got {name!r}")
    if kind == "cpu":
        return "cpu"
    import torch

    cuda = torch.cuda.is_available()
    mps = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    if kind == "auto":
        return "cuda" if cuda else "mps" if mps else "cpu"
    if kind == "cuda":
        if not cuda:
            raise DeviceError(
                f"device {name} is not available here (torch {torch.__version__} sees no CUDA "
                "GPU); use --device cpu, or install a CUDA build of torch on a GPU machine"
            )
        index = int(requested.split(":", 1)[1]) if ":" in requested else 0
        if index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {name} is not available here ({torch.cuda.device_count()} CUDA GPU(s))"
            )
        return requested
    if not mps:
        raise DeviceError(
            f"device {name} is not available here (no Apple Metal GPU); use --device cpu"
        )
    return "mps"


def check_precision(precision: str, device: str = "cpu") -> str:
    """``precision`` if ``device`` supports it.

    Raises
    ------
    DeviceError
        ``float16`` on a CPU, ``bfloat16`` on a GPU without it, or an unknown name.
    """
    check_choice(precision, PRECISIONS, "precision", error=DeviceError)
    kind = device.split(":", 1)[0]
    if precision == "float16" and kind == "cpu":
        raise DeviceError("precision float16 is not supported on cpu; use bfloat16 or float32")
    if precision == "bfloat16" and kind == "cuda":
        import torch

        if not torch.cuda.is_bf16_supported():
            raise DeviceError(f"{device} does not support bfloat16; use float16 or float32")
    return precision


def torch_dtype(precision: str) -> Any:
    """The torch dtype of a precision name."""
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        precision
    ]


@contextlib.contextmanager
def autocast(device: str = "cpu", precision: str = "float32") -> Iterator[None]:
    """Run the block with matrix products in ``precision`` (nothing changes for float32)."""
    if precision == "float32":
        yield
        return
    import torch

    with torch.autocast(device.split(":", 1)[0], dtype=torch_dtype(precision)):
        yield


@contextlib.contextmanager
def on_device(device: str) -> Iterator[None]:
    """Inside, tensors made without a device land on ``device`` (torch's default device);
    nothing changes on the CPU."""
    if device == "cpu":
        yield
        return
    import torch

    with torch.device(device):
        yield


def place(model: Any, device: str) -> Any:
    """Move ``model`` (a torch module, or a loaded model with ``.model``) to ``device`` when it
    is elsewhere; returns it."""
    module = getattr(model, "model", model)
    current = next(iter(module.parameters()), None)
    if current is not None and str(current.device) != device:
        module.to(device)
    return model


def model_device(model: Any) -> Any:
    """The device of a module's parameters (inputs go there)."""
    import torch

    module = getattr(model, "model", model)
    first = next(iter(module.parameters()), None)
    return first.device if first is not None else torch.device("cpu")


# --------------------------------------------------------------------------- CPU threads


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, description: str, enabled: bool) -> Any:
    """A tqdm bar over ``total`` batches, or one that shows nothing (disabled, or one batch)."""
    if not enabled or total <= 1:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit="batch", leave=False)


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat, or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def free_cpus(sample_seconds: float = 0.2) -> int:
    """The CPUs not busy with other work, measured over ``sample_seconds`` (at least 1).

    >>> 1 <= free_cpus(0.05) <= usable_cpus()
    True
    """
    cpus = usable_cpus()
    first = _cpu_times()
    if first is None:
        return cpus
    time.sleep(sample_seconds)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return cpus
    machine = os.cpu_count() or cpus
    busy = (second[0] - first[0]) / (second[1] - first[1]) * machine
    return max(1, min(cpus, int(cpus - busy + 0.5)))


def passive_openmp() -> bool:
    """Ask OpenMP to let idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user set
    a policy; it takes effect only before torch is imported. Returns whether it is in effect."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return os.environ["OMP_WAIT_POLICY"].upper() == "PASSIVE" or "torch" not in sys.modules


def configure_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``threads``, or (None) to the CPUs free right now;
    returns the number set.

    Raises
    ------
    DeviceError
        For ``threads`` < 1.
    """
    if threads is not None and threads < 1:
        raise DeviceError(f"threads must be >= 1; got {threads}")
    passive_openmp()
    chosen = threads if threads is not None else free_cpus()
    import torch

    torch.set_num_threads(chosen)
    return chosen


def free_gpu_bytes(device: str) -> int | None:
    """The free memory of the CUDA device ``device`` in bytes; ``None`` on any other device."""
    if not device.startswith("cuda"):
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def batch_scale(device: str) -> float:
    """How much larger a batch may be on ``device`` than on a CPU: the free GPU memory in
    units of 4 GiB (at least 1, at most 16); 1 on a CPU or Apple GPU."""
    free = free_gpu_bytes(device)
    if free is None:
        return 1.0
    return float(min(16.0, max(1.0, free / 4 / 2**30)))


def compute_fields(device: str, precision: str) -> dict[str, str]:
    """The signature fields of where and how a model ran."""
    return {"device": device.split(":", 1)[0], "precision": precision}
