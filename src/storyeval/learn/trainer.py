"""The training loop shared by UNION and the NSP head.

:func:`fit` fine-tunes a task's model with AdamW (linear warm-up, then linear decay),
evaluates on the dev set after every epoch (or every ``eval_every`` steps), keeps the weights
with the lowest dev loss, stops early after ``patience`` evaluations without improvement, shows
a progress bar, and writes a resumable checkpoint to ``OUTPUT/checkpoint/`` every
``save_every`` steps, after every evaluation and when interrupted. Running the same training
again into the same directory resumes from the checkpoint (the signature must match); the
finished model directory holds the task's files plus ``storyeval.json`` (written last, so
a directory without it is an unfinished run).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from storyeval.base.errors import OutputDirectoryError, StoryevalError
from storyeval.base.io import write_text_atomic
from storyeval.base.signature import Signature

METADATA_FILE = "storyeval.json"
CHECKPOINT_DIR = "checkpoint"
FORMAT_VERSION = 1


class TrainingInterrupted(StoryevalError):
    """Training stopped before the end; the checkpoint lets the same command resume."""


@dataclass(frozen=True)
class TrainingConfig:
    """Optimization settings (defaults: Guan & Huang 2020, section 4.1, and BERT fine-tuning).

    Attributes
    ----------
    epochs : int
        Passes over the training data (at most; early stopping may end sooner).
    learning_rate : float
        Peak AdamW learning rate (5e-5).
    batch_size : int
        Examples per step (10).
    seed : int
        Seed for initialization, data order and dropout.
    patience : int
        Evaluations without a lower dev loss before stopping.
    warmup : float
        Share of the steps with a linearly rising learning rate (then linear decay to 0).
    weight_decay : float
        AdamW weight decay (not applied to biases and LayerNorm weights).
    max_grad_norm : float
        Gradient clipping norm.
    eval_every : int or None
        Evaluate every this many steps (``None``: after every epoch).
    save_every : int
        Write a resumable checkpoint every this many steps.
    max_steps : int or None
        Stop after this many steps in total.
    head_learning_rate : float or None
        Peak learning rate of the newly initialized heads (``None``: ``learning_rate``, as in
        the paper). A higher one shortens the initial plateau on small CPU budgets.
    precision : {"float32", "bfloat16"}
        ``bfloat16`` runs the forward passes of training under autocast (about 2x on CPUs
        with bf16 support; the weights, gradients and optimizer stay float32). In the
        signature when not float32.
    bucket : bool
        Length-bucketed batches: the shuffled examples are cut into pools of 50 batches, each
        pool sorted by length and cut into batches, and the batches shuffled, so a batch pads
        to similar lengths (dynamic padding wastes little). Needs the task's
        ``example_length``; in the signature.
    device : str
        Where the model trains (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``auto``); in the
        signature when not the CPU. Tensors the task makes land there (torch's default device
        inside the run).
    """

    epochs: int = 3
    learning_rate: float = 5e-5
    batch_size: int = 10
    seed: int = 42
    patience: int = 2
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    eval_every: int | None = None
    save_every: int = 200
    max_steps: int | None = None
    head_learning_rate: float | None = None
    precision: str = "float32"
    bucket: bool = True
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.precision not in ("float32", "bfloat16"):
            raise ValueError(
                f"precision must be float32 or bfloat16 for training; got {self.precision!r}"
            )
        from storyeval.models.devices import check_precision, resolve_device

        object.__setattr__(self, "device", resolve_device(self.device))
        check_precision(self.precision, self.device)
        positive_ints = {"epochs": self.epochs, "batch_size": self.batch_size}
        positive_ints["patience"] = self.patience
        positive_ints["save_every"] = self.save_every
        for name, value in positive_ints.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        for name in ("eval_every", "max_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None; got {value!r}")
        if not (isinstance(self.learning_rate, int | float) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}")
        if self.head_learning_rate is not None and not self.head_learning_rate > 0:
            raise ValueError(
                f"head_learning_rate must be positive or None; got {self.head_learning_rate!r}"
            )
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"warmup must be in [0, 1); got {self.warmup!r}")
        if self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError("weight_decay must be >= 0 and max_grad_norm > 0")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer; got {self.seed!r}")

    def signature_fields(self) -> dict[str, int | float | str | None]:
        """The optimization settings that change the trained model, for its signature."""
        fields: dict[str, int | float | str | None] = {
            "lr": self.learning_rate,
            "head_lr": self.head_learning_rate,
            "batch": self.batch_size,
            "epochs": self.epochs,
            "max_steps": self.max_steps,
            "warmup": self.warmup,
            "weight_decay": self.weight_decay,
            "patience": self.patience,
            "eval_every": self.eval_every,
            "seed": self.seed,
        }
        if self.precision != "float32":
            fields["precision"] = self.precision
        if self.device != "cpu":
            fields["device"] = self.device.split(":", 1)[0]
        if self.bucket:
            fields["bucket"] = "length"
        return fields


class TrainingTask(Protocol):
    """What :func:`fit` needs from a learned metric."""

    kind: str
    model: Any  # torch.nn.Module

    def batch_loss(self, batch: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
        """The mean loss of a batch (a scalar tensor) and numbers for the progress bar
        (floats or detached scalar tensors: read only when the bar shows them, so a GPU
        step does not wait for its own loss)."""
        ...

    def evaluate(self, examples: Sequence[Any]) -> dict[str, float]:
        """Dev metrics; must include ``loss`` (lower is better) and ``accuracy``."""
        ...

    def save(self, directory: Path) -> None:
        """Write the trained model's files (not the metadata) into ``directory``."""
        ...

    # Optional: ``example_length(example) -> int``, a cheap length for length-bucketed batches.
    # Optional: ``example_group(example) -> key or None``: examples with one key share a batch.


@dataclass
class TrainingResult:
    """What a training run produced.

    Attributes
    ----------
    directory : Path
        The finished model directory.
    signature : Signature
        The model's signature (stored in ``storyeval.json``).
    metadata : dict
        The contents of ``storyeval.json``: kind, signature, task config, training summary.
    resumed : bool
        Whether this run continued an interrupted one.
    reused : bool
        Whether a finished model with the same signature was already there (nothing trained).
    model : torch.nn.Module or None
        The trained model in memory, with the kept (best) weights (``None`` when reused).
    """

    directory: Path
    signature: Signature
    metadata: dict[str, Any]
    resumed: bool = False
    reused: bool = False
    model: Any = None

    @property
    def dev(self) -> dict[str, float]:
        """Dev metrics of the kept (best) weights."""
        return dict(self.metadata["training"]["best_dev"])


@dataclass
class _State:
    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    best_loss: float = math.inf
    best_step: int = 0
    best_dev: dict[str, float] = field(default_factory=dict)
    bad_evaluations: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    stopped_early: bool = False
    seconds: float = 0.0


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """The ``storyeval.json`` of a finished model directory.

    Raises
    ------
    storyeval.base.errors.ModelLoadError
        When the directory is missing, unfinished or not a storyeval model.
    """
    from storyeval.base.errors import ModelLoadError

    path = Path(directory)
    if not path.is_dir():
        raise ModelLoadError(f"{path}: no such model directory")
    meta = path / METADATA_FILE
    if not meta.is_file():
        hint = (
            "its training has not finished (run the same train command again to resume)"
            if (path / CHECKPOINT_DIR).is_dir()
            else "it was not written by `storyeval train`"
        )
        raise ModelLoadError(
            f"{path}: not a finished storyeval model ({METADATA_FILE} missing): {hint}"
        )
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{meta}: unreadable metadata: {exc}") from exc
    if not isinstance(data, dict) or "kind" not in data or "signature" not in data:
        raise ModelLoadError(f"{meta}: not storyeval model metadata (no kind or signature)")
    return data


def _prepare_directory(output: Path, signature: Signature, overwrite: bool) -> str:
    """Decide what to do with ``output``: ``fresh``, ``resume`` or ``reuse``."""
    if not output.exists():
        return "fresh"
    if not output.is_dir():
        raise OutputDirectoryError(f"{output}: exists and is not a directory")
    meta = output / METADATA_FILE
    checkpoint = output / CHECKPOINT_DIR
    if meta.is_file():
        try:
            existing = Signature.from_dict(json.loads(meta.read_text())["signature"])
        except (ValueError, KeyError, TypeError):
            existing = None
        if existing == signature and not overwrite:
            return "reuse"
        if not overwrite:
            raise OutputDirectoryError(
                f"{output}: holds a model trained with other settings ({_difference(existing, signature)}); "
                "pass --overwrite to replace it or choose another directory"
            )
        shutil.rmtree(output)
        return "fresh"
    if checkpoint.is_dir():
        try:
            saved = Signature.from_json((checkpoint / "signature.json").read_text())
        except (OSError, ValueError):
            saved = None
        if saved == signature and not overwrite:
            return "resume"
        if not overwrite:
            raise OutputDirectoryError(
                f"{output}: holds an unfinished run with other settings ({_difference(saved, signature)}); "
                "run it again with the same settings to resume, or pass --overwrite to start over"
            )
        shutil.rmtree(output)
        return "fresh"
    if any(output.iterdir()):
        raise OutputDirectoryError(
            f"{output}: exists and is not a storyeval model directory; choose a new or empty one"
        )
    return "fresh"


def existing_model(
    output: str | Path, signature: Signature, *, overwrite: bool = False
) -> TrainingResult | None:
    """The finished model in ``output`` when it has this signature (so training can be
    skipped), else ``None``. Raises :class:`OutputDirectoryError` early when ``output``
    holds a model or run with other settings and ``overwrite`` is false."""
    path = Path(output)
    if _prepare_directory(path, signature, overwrite) == "reuse":
        return TrainingResult(path, signature, read_metadata(path), reused=True)
    return None


def _difference(old: Signature | None, new: Signature) -> str:
    if old is None:
        return "unreadable signature"
    keys = [k for k in {**old.fields, **new.fields} if old.fields.get(k) != new.fields.get(k)]
    if old.name != new.name:
        keys.insert(0, "kind")
    if old.version != new.version:
        keys.append("version")
    return "differs in " + ", ".join(keys) if keys else "differs"


#: Batches per pool that length bucketing sorts together: big enough to find similar
#: lengths, small enough to keep the order random.
BUCKET_POOL = 50


def _batches(
    n: int,
    batch_size: int,
    seed: int,
    epoch: int,
    lengths: Sequence[int] | None = None,
    groups: Sequence[Any] | None = None,
) -> list[list[int]]:
    """The epoch's batches of example indices: a seeded shuffle, or with ``lengths`` length
    buckets (pools of ``BUCKET_POOL`` batches sorted by length, the batches then shuffled).
    With ``groups`` (a key per example), the examples of a group stay in one batch (a story
    and its negatives, for a loss that compares them); batches then hold whole groups up to
    ``batch_size`` examples."""
    rng = random.Random(f"{seed}|epoch|{epoch}")
    units = _units(n, groups)
    rng.shuffle(units)
    if lengths is None:
        return packed_batches(units, batch_size)
    pool = batch_size * BUCKET_POOL
    batches: list[list[int]] = []
    start = 0
    while start < len(units):
        chunk, size = [], 0
        while start < len(units) and size < pool:
            chunk.append(units[start])
            size, start = size + len(units[start]), start + 1
        chunk.sort(key=lambda unit: max(lengths[index] for index in unit))
        batches += packed_batches(chunk, batch_size)
    rng.shuffle(batches)
    return batches


def _units(n: int, groups: Sequence[Any] | None) -> list[list[int]]:
    """The indices that must share a batch: one each, or the examples of each group."""
    if groups is None:
        return [[index] for index in range(n)]
    members: dict[Any, list[int]] = {}
    for index, key in enumerate(groups):
        members.setdefault(("group", key) if key is not None else ("alone", index), []).append(
            index
        )
    return list(members.values())


def packed_batches(units: Sequence[list[int]], batch_size: int) -> list[list[int]]:
    """Consecutive units packed into batches of at most ``batch_size`` examples (a unit
    larger than that is a batch of its own)."""
    batches: list[list[int]] = []
    current: list[int] = []
    for unit in units:
        if current and len(current) + len(unit) > batch_size:
            batches.append(current)
            current = []
        current = current + unit
    if current:
        batches.append(current)
    return batches


def _optimizer(model: Any, config: TrainingConfig, head_prefixes: tuple[str, ...] = ()) -> Any:
    import torch

    head_lr = config.head_learning_rate or config.learning_rate
    groups: dict[tuple[bool, bool], list[Any]] = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        lowered = name.lower()
        no_decay = name.endswith("bias") or "layernorm" in lowered
        head = name.startswith(head_prefixes) if head_prefixes else False
        groups.setdefault((no_decay, head), []).append(parameter)
    param_groups = [
        {
            "params": params,
            "weight_decay": 0.0 if no_decay else config.weight_decay,
            "lr": head_lr if head else config.learning_rate,
        }
        for (no_decay, head), params in sorted(groups.items())
    ]
    try:  # the fused kernel: one pass over all parameters (8x faster than the loop on CPU)
        return torch.optim.AdamW(param_groups, lr=config.learning_rate, fused=True)
    except (RuntimeError, TypeError):  # a device or dtype without the fused kernel
        return torch.optim.AdamW(param_groups, lr=config.learning_rate)


def _schedule(optimizer: Any, total_steps: int, warmup: float) -> Any:
    import torch

    warmup_steps = int(total_steps * warmup)

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        remaining = total_steps - step
        return max(0.0, remaining / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _save_torch(obj: Any, path: Path) -> None:
    import torch

    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _cpu_state(model: Any) -> dict[str, Any]:
    """A copy of the weights; tensors shared in the model (tied heads) stay shared."""
    copies: dict[tuple[int, tuple[int, ...], Any], Any] = {}
    state = {}
    for key, value in model.state_dict().items():
        if value.numel() == 0:
            state[key] = value.detach().clone()
            continue
        same = (value.data_ptr(), tuple(value.shape), value.dtype)
        if same not in copies:
            copies[same] = value.detach().clone()
        state[key] = copies[same]
    return state


@contextlib.contextmanager
def _progress(total: int, initial: int, enabled: bool, description: str) -> Iterator[Any]:
    from tqdm import tqdm

    bar = tqdm(
        total=total,
        initial=initial,
        disable=not enabled,
        desc=description,
        unit="step",
        dynamic_ncols=True,
        leave=True,
    )
    try:
        yield bar
    finally:
        bar.close()


def fit(
    task: TrainingTask,
    train: Sequence[Any],
    dev: Sequence[Any],
    config: TrainingConfig,
    output: str | Path,
    signature: Signature,
    *,
    task_config: dict[str, Any] | None = None,
    data_summary: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> TrainingResult:
    """Train ``task.model`` on ``train`` with early stopping on ``dev``; write the finished
    model into ``output``.

    Parameters
    ----------
    task : TrainingTask
        Supplies the model, the batch loss, the dev evaluation and the saving.
    train, dev : sequence
        Training and dev examples (whatever the task's ``batch_loss`` takes).
    config : TrainingConfig
        Optimization settings.
    output : path
        The model directory. If it holds an unfinished run with the same signature, training
        resumes from its checkpoint; if it holds a finished model with the same signature,
        nothing is trained and that model is returned (``reused``).
    signature : Signature
        Identifies the model (base model, task settings, optimization, seed, data hash).
    task_config, data_summary : dict, optional
        Stored in ``storyeval.json`` (``config`` and ``training.data``).
    overwrite : bool
        Replace a model or run with another signature instead of refusing.
    progress : bool
        Show a progress bar on stderr.
    on_step : callable, optional
        Called with the global step number after every optimizer step (tests use it to
        interrupt a run).

    Raises
    ------
    TrainingInterrupted
        On ``KeyboardInterrupt``, after writing the checkpoint.
    OutputDirectoryError
        When ``output`` holds something else.
    """
    output = Path(output)
    action = _prepare_directory(output, signature, overwrite)
    if action == "reuse":
        metadata = read_metadata(output)
        return TrainingResult(output, signature, metadata, reused=True)
    if not train:
        raise StoryevalError("there are no training examples")
    if not dev:
        raise StoryevalError("there are no dev examples")
    checkpoint = output / CHECKPOINT_DIR
    checkpoint.mkdir(parents=True, exist_ok=True)
    write_text_atomic(checkpoint / "signature.json", signature.to_json() + "\n")
    from storyeval.models.devices import on_device, place

    place(task.model, config.device)
    with on_device(config.device):
        run = _Training(task, train, dev, config, checkpoint, on_step)
        resumed = run.start(resume=action == "resume")
        run.loop(progress)
        run.finish()
    place(task.model, "cpu")
    task.save(output)
    metadata = {
        "format": FORMAT_VERSION,
        "kind": task.kind,
        "signature": signature.to_dict(),
        "signature_text": signature.render(),
        "config": dict(task_config or {}),
        "optimization": asdict(config),
        "training": run.summary(data_summary),
    }
    write_text_atomic(output / METADATA_FILE, json.dumps(metadata, indent=2) + "\n")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return TrainingResult(output, signature, metadata, resumed=resumed, model=task.model)


class _Training:
    """One training run: optimizer, schedule, counters, checkpoints and evaluations."""

    #: The progress bar's loss is read every this many steps (reading it makes a GPU wait).
    SHOW_EVERY = 20

    def __init__(
        self,
        task: TrainingTask,
        train: Sequence[Any],
        dev: Sequence[Any],
        config: TrainingConfig,
        checkpoint: Path,
        on_step: Callable[[int], None] | None,
    ) -> None:
        self.task, self.train, self.dev, self.config = task, train, dev, config
        self.checkpoint, self.on_step = checkpoint, on_step
        self.model = task.model
        self._lengths: list[int] | None = None
        steps_per_epoch = len(self.epoch_batches(0))
        self.total_steps = steps_per_epoch * config.epochs
        if config.max_steps is not None:
            self.total_steps = min(self.total_steps, config.max_steps)
        heads = tuple(getattr(task, "head_prefixes", ()))
        self.optimizer = _optimizer(self.model, config, heads)
        self.scheduler = _schedule(self.optimizer, self.total_steps, config.warmup)
        self.state = _State()
        self.best_weights: dict[str, Any] | None = None
        self.best_on_disk = -1  # the step whose weights best.pt holds
        self.started = 0.0
        self.step_seconds = 0.0  # optimizer steps only: no evaluation, no checkpoint
        self._first_step = 0
        self.quiet = False  # no bar: one line per evaluation instead
        self.updating = False  # True while the optimizer changes weights not yet counted

    def start(self, *, resume: bool) -> bool:
        """Resume from the checkpoint when there is one (True), else seed a fresh run."""
        import torch

        state_file = self.checkpoint / "state.pt"
        resumed = resume and state_file.is_file()
        if resumed:
            saved = torch.load(state_file, map_location="cpu", weights_only=False)
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
            torch.set_rng_state(saved["torch_rng"])
            self.state = _State(**saved["state"])
            best_step = self.state.best_step
            if best_step and best_step == saved.get("best_in_state_step"):
                self.best_weights = _cpu_state(self.model)  # the checkpoint's own weights
            elif (self.checkpoint / "best.pt").is_file():
                self.best_weights = torch.load(self.checkpoint / "best.pt", map_location="cpu")
                self.best_on_disk = best_step
        else:
            torch.manual_seed(self.config.seed)
        self.started = time.perf_counter() - self.state.seconds
        return resumed

    def save_checkpoint(self) -> None:
        """Write the resumable state; the best weights go to ``best.pt`` only when they
        differ from the current ones (each best once), to keep writes small."""
        import torch

        state = self.state
        best_is_current = self.best_weights is not None and state.best_step == state.global_step
        if (
            self.best_weights is not None
            and not best_is_current
            and self.best_on_disk != state.best_step
        ):
            _save_torch(self.best_weights, self.checkpoint / "best.pt")
            self.best_on_disk = state.best_step
        _save_torch(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "state": asdict(state),
                "best_in_state_step": state.global_step if best_is_current else None,
            },
            self.checkpoint / "state.pt",
        )

    def evaluate(self) -> bool:
        """Evaluate on dev; return True when training should stop early."""
        import torch

        state = self.state
        self.model.eval()
        with torch.no_grad():
            metrics = self.task.evaluate(self.dev)
        self.model.train()
        entry = {"step": state.global_step, "epoch": state.epoch, **metrics}
        entry["seconds"] = round(time.perf_counter() - self.started, 3)
        state.history.append(entry)
        if metrics["loss"] < state.best_loss - 1e-9:
            state.best_loss = float(metrics["loss"])
            state.best_step = state.global_step
            state.best_dev = {k: float(v) for k, v in metrics.items()}
            state.bad_evaluations = 0
            self.best_weights = _cpu_state(self.model)
        else:
            state.bad_evaluations += 1
        self.save_checkpoint()
        if self.quiet:
            import sys

            rate = self._rate()
            speed = f", {rate:.2f} examples/s" if rate else ""
            print(
                f"{self.task.kind}: step {state.global_step}/{self.total_steps}, dev loss "
                f"{metrics['loss']:.4f}{speed}",
                file=sys.stderr,
                flush=True,
            )
        return state.bad_evaluations >= self.config.patience

    def _rate(self) -> float | None:
        """Training examples per second of optimizer steps (evaluation and checkpoints are
        not counted)."""
        steps = self.state.global_step - self._first_step
        if self.step_seconds <= 0 or steps <= 0:
            return None
        return steps * self.config.batch_size / self.step_seconds

    def evaluation_due(self, at_end: bool) -> bool:
        """An evaluation belongs to this point and has not happened (also after a resume
        that was interrupted between a step and its evaluation)."""
        state = self.state
        if state.global_step == 0:
            return False
        if state.history and state.history[-1]["step"] == state.global_step:
            return False
        if at_end:
            return True
        if self.config.eval_every:
            return state.global_step % self.config.eval_every == 0
        return state.step_in_epoch == 0  # an epoch has just ended

    def step(self, batch: list[Any], bar: Any) -> None:
        """One optimizer step on ``batch``."""
        import torch

        from storyeval.models.devices import autocast

        began = time.perf_counter()
        with autocast(self.config.device, self.config.precision):
            loss, shown = self.task.batch_loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.updating = True
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step_in_epoch += 1
        self.state.global_step += 1
        self.updating = False
        self.state.seconds = time.perf_counter() - self.started
        self.step_seconds += time.perf_counter() - began
        bar.update(1)
        if self.state.global_step % self.SHOW_EVERY == 0 or self.state.global_step == 1:
            bar.set_postfix({k: f"{float(v):.3f}" for k, v in shown.items()}, refresh=False)
        if self.on_step is not None:
            self.on_step(self.state.global_step)

    def lengths(self) -> list[int] | None:
        """The examples' lengths for bucketing, None when off or the task cannot tell."""
        length = getattr(self.task, "example_length", None)
        if not self.config.bucket or length is None:
            return None
        if self._lengths is None:
            self._lengths = [length(example) for example in self.train]
        return self._lengths

    def groups(self) -> list[Any] | None:
        """The examples' batch groups, None when the task keeps none (its
        ``example_group`` is missing or gives None)."""
        group = getattr(self.task, "example_group", None)
        keys = [group(example) for example in self.train] if group is not None else []
        return keys if any(key is not None for key in keys) else None

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The batches of example indices of one epoch."""
        return _batches(
            len(self.train),
            self.config.batch_size,
            self.config.seed,
            epoch,
            self.lengths(),
            self.groups(),
        )

    def epoch(self, bar: Any) -> None:
        """The rest of the current epoch (stops early when the dev loss stops improving)."""
        state, config = self.state, self.config
        batches = self.epoch_batches(state.epoch)
        while state.step_in_epoch < len(batches) and state.global_step < self.total_steps:
            self.step([self.train[i] for i in batches[state.step_in_epoch]], bar)
            if self.evaluation_due(state.global_step >= self.total_steps) and config.eval_every:
                if self.evaluate():
                    state.stopped_early = state.global_step < self.total_steps
                    state.finished = True
                    return
            elif state.global_step % config.save_every == 0:
                self.save_checkpoint()
        if state.step_in_epoch >= len(batches):
            state.epoch += 1
            state.step_in_epoch = 0

    def loop(self, progress: bool) -> None:
        """Train until the last epoch or step, or an early stop; an interrupt leaves a
        consistent checkpoint and raises :class:`TrainingInterrupted`."""
        state = self.state
        self.model.train()
        self.quiet = not progress
        self._first_step = state.global_step  # a resumed run counts its own steps
        label = f"training {self.task.kind}"
        try:
            with _progress(self.total_steps, state.global_step, progress, label) as bar:
                while not state.finished:
                    at_end = (
                        state.epoch >= self.config.epochs or state.global_step >= self.total_steps
                    )
                    if self.evaluation_due(at_end) and self.evaluate():
                        state.stopped_early = not at_end
                        state.finished = True
                    elif at_end:
                        state.finished = True
                    else:
                        self.epoch(bar)
                state.seconds = time.perf_counter() - self.started
        except KeyboardInterrupt:
            state.seconds = time.perf_counter() - self.started
            if not self.updating:  # else keep the last checkpoint, which is consistent
                self.save_checkpoint()
            raise TrainingInterrupted(
                f"training interrupted at step {state.global_step} of {self.total_steps}; the "
                f"checkpoint is in {self.checkpoint}: run the same command again to resume"
            ) from None

    def finish(self) -> None:
        """Load the best weights into the model."""
        if self.best_weights is None:  # no evaluation happened (not with a non-empty dev set)
            self.best_weights = _cpu_state(self.model)
        self.model.load_state_dict(self.best_weights)
        self.model.eval()

    def summary(self, data_summary: dict[str, Any] | None) -> dict[str, Any]:
        """The ``training`` section of ``storyeval.json``."""
        state = self.state
        speed = self._rate()
        return {
            "steps": state.global_step,
            "total_steps": self.total_steps,
            "epochs_completed": state.epoch,
            "best_step": state.best_step,
            "best_dev": state.best_dev,
            "stopped_early": state.stopped_early,
            "seconds": round(state.seconds, 3),
            "train_examples": len(self.train),
            "dev_examples": len(self.dev),
            "examples_per_second": round(speed, 3) if speed is not None else None,
            "history": state.history,
            "data": dict(data_summary or {}),
        }
