"""A CUDA device that runs on the CPU: the device-placement checks of a GPU, without a GPU.

Inside :func:`fake_cuda`, ``--device cuda`` is accepted, and every tensor remembers whether it
"lives" on the GPU: moved there with ``.to("cuda")``/``.cuda()``, made with ``device="cuda"``
(or inside ``torch.device("cuda")``), a parameter of a module moved there, or computed from
such tensors. An operation that mixes a GPU tensor with a CPU tensor of one or more dimensions
raises torch's own error ("Expected all tensors to be on the same device"), and ``.numpy()`` of a
GPU tensor raises as on CUDA, so a code path that forgets to move its inputs, or converts
before ``.cpu()``, fails here as it would on a real card (the bug an H200 found in the encoder
warm-up). Everything still computes on the CPU, so the numbers equal the CPU's exactly;
what a real GPU changes (kernels, precision) is for the tests marked ``gpu``.

Indexing a GPU tensor with CPU indices and assigning CPU values into it are allowed, as CUDA
allows them; 0-dimensional CPU tensors mix freely, as CUDA lets CPU scalars mix.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

GPU = torch.device("cuda", 0)
_DEVICE = torch._C.TensorBase.device
_IS_CUDA = torch._C.TensorBase.is_cuda
_GRAD = torch._C.TensorBase.grad
_FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.arange,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.linspace,
    torch.eye,
    torch.zeros_like,
    torch.ones_like,
    torch.full_like,
    torch.empty_like,
    torch.rand_like,
    torch.randn_like,
}
_PERMISSIVE = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.copy_}


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.split(":", 1)[0] == "cuda"


def _is_cpu(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and device == "cpu"


class FakeCuda(TorchFunctionMode):
    """The mode tracking which tensors live on the fake GPU (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._gpu: dict[int, weakref.ref[torch.Tensor]] = {}
        self.default_gpu = False

    def on_gpu(self, tensor: Any) -> bool:
        """Whether ``tensor`` lives on the fake GPU."""
        if not isinstance(tensor, torch.Tensor):
            return False
        ref = self._gpu.get(id(tensor))
        return ref is not None and ref() is tensor

    def mark(self, tensor: Any) -> Any:
        """Put ``tensor`` on the fake GPU (in place: it is the same object)."""
        if isinstance(tensor, torch.Tensor):
            key = id(tensor)
            self._gpu[key] = weakref.ref(tensor, lambda _r, k=key: self._gpu.pop(k, None))
        return tensor

    def unmark(self, tensor: Any) -> None:
        """Take ``tensor`` off the fake GPU."""
        self._gpu.pop(id(tensor), None)

    # ------------------------------------------------------------------ dispatch

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        descriptor = getattr(func, "__self__", None)  # a property's getter
        if descriptor is _DEVICE:
            return GPU if self.on_gpu(args[0]) else func(*args)
        if descriptor is _IS_CUDA:
            return self.on_gpu(args[0])
        if descriptor is _GRAD:  # autograd made it without asking: it lives with its tensor
            grad = func(*args)
            return self.mark(grad) if grad is not None and self.on_gpu(args[0]) else grad
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            return self._move(func, args, kwargs)
        if func is torch.Tensor.numpy and self.on_gpu(args[0]):
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                "the tensor to host memory first."
            )
        if func in _FACTORIES:
            return self._factory(func, args, kwargs)
        return self._operation(func, args, kwargs)

    def _move(self, func: Any, args: Any, kwargs: Any) -> Any:
        tensor = args[0]
        if func is torch.Tensor.cuda:
            target: Any = "cuda"
            rest: tuple[Any, ...] = ()
        elif func is torch.Tensor.cpu:
            target, rest = "cpu", ()
        else:
            target, rest, kwargs = self._target(args[1:], kwargs)
        if target is None:  # a dtype change only: stays where it is
            result = func(tensor, *rest, **kwargs)
            return self.mark(result) if self.on_gpu(tensor) else result
        result = torch.Tensor.to(tensor, *rest, **kwargs) if rest or kwargs else tensor
        result = result.view_as(result)  # a new tensor object, whatever `to` returned
        if _is_cuda(target):
            return self.mark(result)
        return result

    def _target(
        self, rest: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        """Where ``Tensor.to(...)`` moves a tensor (None: nowhere), and the arguments left."""
        target = kwargs.pop("device", None)
        kept = []
        for value in rest:
            if isinstance(value, (str, torch.device)):
                target = value
            elif isinstance(value, torch.Tensor):
                target = "cuda" if self.on_gpu(value) else "cpu"
                kept.append(value.dtype)
            else:
                kept.append(value)
        return target, tuple(kept), kwargs

    def _factory(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        device = kwargs.get("device")
        if _is_cuda(device):
            kwargs.pop("device")  # made on the CPU, remembered as the GPU's
        like = args[0] if func.__name__.endswith("_like") and args else None
        result = func(*args, **kwargs)
        gpu = _is_cuda(device) or (
            device is None and (self.on_gpu(like) or (like is None and self.default_gpu))
        )
        return self.mark(result) if gpu else result

    def _operation(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        tensors: list[torch.Tensor] = []
        _collect_tensors(args, tensors)
        _collect_tensors(kwargs, tensors)
        gpu = any(self.on_gpu(t) for t in tensors)
        if gpu and func not in _PERMISSIVE:
            cpu = [t for t in tensors if not self.on_gpu(t) and t.dim() > 0]
            if cpu:
                name = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
                where = ", ".join(
                    f"{tuple(t.shape)}:{'cuda' if self.on_gpu(t) else 'cpu'}" for t in tensors
                )
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    f"devices, cuda:0 and cpu! (fake CUDA, in {name}: {where})"
                )
        result = func(*args, **kwargs)
        if gpu:
            produced: list[torch.Tensor] = []
            _collect_tensors(result, produced)
            for tensor in produced:
                self.mark(tensor)
        return result


def _collect_tensors(value: Any, into: list[torch.Tensor]) -> None:
    """The tensors in ``value`` and in the tuples, lists and dicts it nests (torch's pytree
    walk did this at a third of the simulation's cost: every operation of a model passes here)."""
    if isinstance(value, torch.Tensor):
        into.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _collect_tensors(item, into)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_tensors(item, into)


@contextlib.contextmanager
def fake_cuda(monkeypatch: Any) -> Iterator[FakeCuda]:
    """Run the block with a fake CUDA GPU (``monkeypatch`` is pytest's fixture)."""
    import storyeval.models.devices as devices

    mode = FakeCuda()
    real_to, real_cuda, real_cpu = torch.nn.Module.to, torch.nn.Module.cuda, torch.nn.Module.cpu

    def module_to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device = kwargs.pop("device", None)
        rest = []
        for value in args:
            if isinstance(value, (str, torch.device)):
                device = value
            else:
                rest.append(value)
        if rest or kwargs:
            real_to(self, *rest, **kwargs)
        if device is not None:
            for tensor in [*self.parameters(), *self.buffers()]:
                if _is_cuda(device):
                    mode.mark(tensor)
                elif _is_cpu(device):
                    mode.unmark(tensor)
        return self

    @contextlib.contextmanager
    def on_device(device: str) -> Iterator[None]:
        previous = mode.default_gpu
        mode.default_gpu = _is_cuda(device)
        try:
            yield
        finally:
            mode.default_gpu = previous

    monkeypatch.setattr(torch.nn.Module, "to", module_to)
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, device=None: module_to(self, "cuda"))
    monkeypatch.setattr(torch.nn.Module, "cpu", lambda self: module_to(self, "cpu"))
    monkeypatch.setattr(torch, "Generator", _HostGenerator)
    monkeypatch.setattr(devices, "resolve_device", _resolve)
    monkeypatch.setattr(devices, "batch_scale", lambda device: 1.0)
    monkeypatch.setattr(  # a small card
        devices, "free_gpu_bytes", lambda device: 4 * 2**30 if device.startswith("cuda") else None
    )
    monkeypatch.setattr(devices, "on_device", on_device)
    monkeypatch.setattr(devices, "check_precision", _check_precision)
    del real_cuda, real_cpu
    with mode:
        yield mode


class _HostGenerator(torch.Generator):
    """``torch.Generator(device="cuda")`` made on the CPU (a CPU build has no CUDA generator)."""

    def __new__(cls, device: Any = "cpu") -> _HostGenerator:
        return super().__new__(cls, "cpu")  # type: ignore[call-arg]

    def __init__(self, device: Any = "cpu") -> None:
        pass


def _resolve(name: str | None = "cpu") -> str:
    requested = (name or "cpu").strip().lower()
    return (
        "cuda"
        if requested in ("cuda", "auto")
        else "cuda:0"
        if requested == "cuda:0"
        else requested
    )


def _check_precision(precision: str, device: str = "cpu") -> str:
    if precision == "float16" and not device.startswith("cuda"):
        raise ValueError("precision float16 is not supported on cpu; use bfloat16 or float32")
    return precision  # autocast on "cuda" is off on a CPU build: the CPU computes in float32
