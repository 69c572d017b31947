"""The metric registry: every metric's facts, option schema, option parsing and signature.

This is the one list of metrics. A metric is a typed function registered with
:func:`storyeval.metrics.function.metric`, which reads its inputs and options from the
function's signature and records them here with the facts the author declares
(:class:`MetricFacts`: direction, range, level, families, the model it loads, its card).
Everything else is derived from this registry: :func:`available_metrics`, the typed function
of each name (:attr:`MetricSpec.function`, :data:`storyeval.functional.METRICS`), the CLI's
choices, ``storyeval metrics``, the metric cards and the all-metrics tests.

Modules that register metrics are discovered lazily, on the first lookup:

* every public module of the :mod:`storyeval.metrics` package (so another part of storyeval
  adds a metric by adding a module there; keep its top-level imports light and import torch
  or your training code inside the metric function);
* :data:`OTHER_BUILTIN_MODULES` (the trained models' metrics);
* every module named by an entry point in the group ``storyeval.metrics`` (third-party
  packages).

Options given as text (``--option toy_words.scale=2``) are parsed against the schema:

>>> from storyeval.metrics.function import Texts, Scores, metric
>>> @metric("toy_words", description="Words in the text.", families=("toy",),
...         value_range=(0.0, None), replace=True)
... def toy_words(texts: Texts, *, scale: float = 1.0) -> Scores:
...     return Scores([len(t.split()) * scale for t in texts])
>>> resolved = resolve_options(["toy_words"], {"toy.scale": "2"})
>>> resolved["toy_words"]
{'scale': 2.0}
>>> get_metric("toy_words").signature(resolved["toy_words"]).render().rsplit("|", 1)[0]
'toy_words|scale:2.0'
>>> get_metric("toy_words").function is toy_words
True
>>> unregister_metric("toy_words")
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from storyeval.base.errors import StoryevalError
from storyeval.base.registry import Registry, UnknownNameError
from storyeval.base.signature import Signature, SignatureValue

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from storyeval.corpus import Story
    from storyeval.metrics.context import ScoringContext

Level = Literal["item", "system", "corpus"]
ModelRole = Literal["encoder", "causal-lm", "glove", "spacy", "nsp", "checkpoint"]

_TRUE = {"1", "true", "yes", "y", "on"}
_FALSE = {"0", "false", "no", "n", "off"}
_NONE = {"none", "null", "auto"}


class UnknownMetricError(UnknownNameError):
    """A metric or option name that the registry does not know."""


class OptionError(StoryevalError, ValueError):
    """An option that is unknown, malformed, or has an invalid value."""


@dataclass(frozen=True)
class MetricOption:
    """One typed option of a metric.

    Parameters
    ----------
    name : str
        The key users write after the dot (``bertscore.layer``).
    type : {int, float, bool, str}
        Values given as text on the command line are converted to this type.
    default : object
        The value when the user gives none. ``None`` means "decided at run time" (e.g. the
        model's recommended layer); write ``none`` or ``auto`` to ask for it explicitly.
    help : str
        One line for ``storyeval metrics --options`` and the metric cards.
    choices : tuple, optional
        The allowed values.
    minimum, maximum : float, optional
        Inclusive bounds for numbers.
    in_signature : bool
        Whether the value changes the number (``batch_size`` does not).
    required : bool
        The metric cannot run without it (then it is never in the default suite).
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    in_signature: bool = True
    required: bool = False

    def __post_init__(self) -> None:
        if self.type not in (int, float, bool, str):
            raise TypeError(f"option {self.name!r}: type must be int, float, bool or str")
        if not self.name or "." in self.name or "=" in self.name:
            raise ValueError(f"option name must be non-empty without '.' or '='; got {self.name!r}")

    def parse(self, raw: Any, *, where: str = "") -> Any:
        """Convert ``raw`` (text or a Python value) to this option's type and validate it."""
        label = where or self.name
        is_choice = self.choices is not None and raw in self.choices
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE and not is_choice):
            if self.required:
                raise OptionError(f"option {label} needs a value")
            if self.default is None or self.type is str:
                return None
            raise OptionError(f"option {label} cannot be empty; give a {self.type.__name__}")
        value = _convert(self.type, raw, label)
        if self.choices is not None and value not in self.choices:
            shown = ", ".join(str(c) for c in self.choices)
            raise OptionError(f"option {label} must be one of {shown}; got {raw!r}")
        if self.minimum is not None and value < self.minimum:
            raise OptionError(f"option {label} must be >= {self.minimum}; got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise OptionError(f"option {label} must be <= {self.maximum}; got {value!r}")
        return value

    def describe(self) -> str:
        """``name (type, default X): help``."""
        kind = self.type.__name__
        if self.choices:
            kind = "|".join(str(c) for c in self.choices)
        default = "required" if self.required else f"default {_show(self.default)}"
        return f"{self.name} ({kind}, {default}): {self.help}"


def _convert(kind: type, raw: Any, label: str) -> Any:
    """``raw`` (text or a Python value) as a bool, int, float or str."""
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise OptionError(f"option {label} must be true or false; got {raw!r}")
    if kind is int:
        whole = not isinstance(raw, bool) and (not isinstance(raw, float) or raw.is_integer())
        try:
            if not whole:
                raise ValueError
            return int(raw)
        except (TypeError, ValueError):
            raise OptionError(f"option {label} must be an integer; got {raw!r}") from None
    if kind is float:
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        except (TypeError, ValueError):
            raise OptionError(f"option {label} must be a number; got {raw!r}") from None
        if value != value:
            raise OptionError(f"option {label} must be a number; got NaN")
        return value
    return str(raw)


def _show(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class MetricBatch:
    """What a metric function receives.

    Attributes
    ----------
    stories : list of Story
        The stories to score (only those that have every input the metric needs).
    context : ScoringContext
        Shared models and the encoder cache (one load and one encoder pass per run).
    all_stories : list of Story
        Every story of the run (for metrics that compare a story with its system's others).
    """

    stories: list[Story]
    context: ScoringContext
    all_stories: list[Story] = field(default_factory=list)


@dataclass
class MetricOutput:
    """What a metric function returns.

    Attributes
    ----------
    values : numpy array, shape (n_items,)
        One value per story of the batch, in batch order; NaN where undefined.
    stats : numpy array, shape (n_items, n_stats), optional
        Per-item sufficient statistics for the corpus statistics of the spec.
    models : dict of str to str
        Identities of the models used (``{"model": "all-MiniLM-L6-v2@cc8b698c9c1f"}``),
        written into the signature.
    fields : dict
        Further settings resolved at run time (e.g. the layer chosen for a model), written
        into the signature.
    notes : list of str
        Things the user should know (e.g. texts split because they were too long).
    omit : tuple of str
        Options that played no part in this run (e.g. the baseline when rescaling is off),
        left out of the signature.
    """

    values: np.ndarray
    stats: np.ndarray | None = None
    models: dict[str, str] = field(default_factory=dict)
    fields: dict[str, SignatureValue] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    omit: tuple[str, ...] = ()


@dataclass(frozen=True)
class CorpusStatistic:
    """A corpus-level value computed from summed (or stacked) per-item statistics.

    ``compute(stats, options)`` receives the stacked statistics of one system's items (shape
    ``(n_items, n_stats)``) and the metric's options, and returns one number; bootstrap
    intervals resample those rows.
    """

    name: str
    compute: Callable[[np.ndarray, Mapping[str, Any]], float]
    description: str = ""


@dataclass(frozen=True)
class SystemValue:
    """One system's value of a :class:`SystemStatistic`.

    Attributes
    ----------
    estimate, ci_low, ci_high, sd : float
        The value, its interval and spread (nan where the statistic has none).
    n : int
        The system's items.
    method : str
        How the interval was obtained.
    fields : dict
        Settings resolved at run time, added to the signature (e.g. the k-means backend).
    notes : tuple of str
        Things the user should know (e.g. a sample too small).
    details : object
        Further results for reports (e.g. MAUVE's divergence curves), not written to tables.
    """

    estimate: float
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    sd: float = float("nan")
    n: int = 0
    method: str = "none"
    fields: Mapping[str, SignatureValue] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    details: Any = None


@dataclass(frozen=True)
class SystemStatistic:
    """A value of a whole system's stories against a reference system's (MAUVE against the
    human stories), computed from per-item statistics after every item is scored.

    ``compute(system_stats, reference_stats, system_stories, reference_stories, options)``
    receives the stacked per-item statistics of the two systems (shape ``(n, n_stats)``)
    and their stories (for lengths and notes), and returns a :class:`SystemValue`. The
    reference system is named by the metric's option ``reference_system``.
    """

    name: str
    compute: Callable[
        [np.ndarray, np.ndarray, Sequence[Story], Sequence[Story], Mapping[str, Any]],
        SystemValue,
    ]
    description: str = ""


EncoderPlan = Callable[
    ["MetricBatch", Mapping[str, Any]], Iterable[tuple[str | None, Sequence[str], Sequence[int]]]
]


@dataclass(frozen=True, kw_only=True)
class MetricFacts:
    """What a metric's author declares beside the function (the rest is read from it).

    Attributes
    ----------
    description : str
        One line: what the metric measures.
    families : tuple of str
        Groups whose options a user can set at once (``--option bertscore.layer=4`` sets
        ``layer`` for every member of ``bertscore`` that has it).
    model : {"encoder", "causal-lm", "glove", "spacy", "nsp", "checkpoint"}, optional
        The kind of model the metric loads.
    higher_is_better : bool or None
        Direction; ``None`` for descriptive measures (e.g. sentence length).
    value_range : (low, high)
        Bounds (``None`` for unbounded).
    level : {"item", "system", "corpus"}
        ``"system"`` for values that only make sense across a system's stories (self-BLEU);
        ``"corpus"`` for metrics with no value per story, only per system against a reference
        system (MAUVE): their per-item output is the sufficient statistics, and no per-item
        score is written.
    corpus : tuple of CorpusStatistic
        Corpus-level statistics computed from the per-item sufficient statistics.
    system_statistics : tuple of SystemStatistic
        Per-system values against the reference system (the option ``reference_system``),
        computed from the per-item sufficient statistics (level ``"corpus"``).
    corpus_wide : callable, optional
        ``corpus_wide(options)`` is true when a story's value depends on the other stories
        of the run (e.g. idf weights computed on the corpus): the metric then runs on all
        stories at once rather than block by block.
    item_statistic : str
        The name of the mean of item values in per-system tables (``mean_item_perplexity``).
    offline, unavailable_offline : bool, str
        Whether the metric runs with the offline defaults, and if not, why.
    default : bool
        Whether the metric belongs to the default suite (when it can run).
    plan : callable, optional
        ``plan(batch, options)`` yields ``(encoder_name, texts, layers)`` the metric will read
        from the encoder cache, so that the run encodes every text once, in one pass.
    backends : tuple of str, optional
        Distributions whose version can change the numbers (recorded in the signature);
        ``None``: ``transformers`` and ``torch`` for metrics that load a neural model.
    card : MetricCard, optional
        The narrative of the metric's card (:class:`storyeval.metrics.cards.MetricCard`); the
        card's facts come from the entry itself.
    """

    description: str
    families: tuple[str, ...] = ()
    model: ModelRole | None = None
    higher_is_better: bool | None = True
    value_range: tuple[float | None, float | None] = (None, None)
    level: Level = "item"
    corpus: tuple[CorpusStatistic, ...] = ()
    system_statistics: tuple[SystemStatistic, ...] = ()
    corpus_wide: Callable[[Mapping[str, Any]], bool] | None = None
    item_statistic: str = "mean"
    offline: bool = True
    default: bool = True
    unavailable_offline: str = ""
    plan: EncoderPlan | None = None
    backends: tuple[str, ...] | None = None
    card: Any = None

    def __post_init__(self) -> None:
        for key in ("families", "corpus", "system_statistics"):
            object.__setattr__(self, key, tuple(getattr(self, key)))
        if self.backends is not None:
            object.__setattr__(self, "backends", tuple(self.backends))
        if self.level not in ("item", "system", "corpus"):
            raise ValueError(f"level must be item, system or corpus; got {self.level!r}")


@dataclass(frozen=True, kw_only=True)
class MetricSpec(MetricFacts):
    """A registered metric: its declared facts and what was read from its function.

    Attributes
    ----------
    name : str
        The registered name (``[A-Za-z0-9_]``).
    compute : callable
        ``compute(batch, options)``: the function on a :class:`MetricBatch` of stories (the
        pipeline's adapter).
    function : callable, optional
        The typed function users call (data positional, options keyword-only).
    needs_reference, needs_prompt : bool
        Stories without them are an error (or, when asked, skipped and counted).
    field_options : tuple of str
        Options whose value is a story field the metric reads.
    options : tuple of MetricOption
        The option schema; unknown keys are rejected.
    module : str
        Where the metric is written.
    """

    name: str
    compute: Callable[[MetricBatch, Mapping[str, Any]], MetricOutput]
    function: Callable[..., Any] | None = None
    needs_reference: bool = False
    needs_prompt: bool = False
    field_options: tuple[str, ...] = ()
    options: tuple[MetricOption, ...] = ()
    module: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backends is None:
            object.__setattr__(self, "backends", _default_backends(self.model))

    @property
    def option_map(self) -> dict[str, MetricOption]:
        """The options by name."""
        return {option.name: option for option in self.options}

    def defaults(self) -> dict[str, Any]:
        """The option values when the user sets none (required options are absent)."""
        return {o.name: o.default for o in self.options if not o.required}

    @property
    def inputs(self) -> tuple[str, ...]:
        """The record fields the metric reads, for listings."""
        names = ["story"]
        if self.needs_prompt:
            names.append("prompt")
        if self.needs_reference:
            names.append("reference")
        names += [f"<{name} field>" for name in self.field_options]
        if self.level in ("system", "corpus"):
            names.append("system")
        return tuple(names)

    @property
    def direction(self) -> str:
        """``higher``, ``lower`` or ``neither``."""
        if self.higher_is_better is None:
            return "neither"
        return "higher" if self.higher_is_better else "lower"

    @property
    def range_text(self) -> str:
        """The value range as text, e.g. ``[0, 1]``."""
        low, high = self.value_range
        show = lambda v, inf: inf if v is None else f"{v:g}"  # noqa: E731
        return f"[{show(low, '-inf')}, {show(high, 'inf')}]"

    def runnable_offline(self) -> tuple[bool, str]:
        """Whether the metric can run with the offline defaults, and if not, why."""
        if not self.offline:
            return False, self.unavailable_offline or "needs a model that is not available offline"
        required = [o.name for o in self.options if o.required]
        if required:
            return False, f"needs option(s) {', '.join(f'{self.name}.{r}' for r in required)}"
        return True, ""

    def signature(
        self,
        options: Mapping[str, Any],
        models: Mapping[str, str] | None = None,
        fields: Mapping[str, SignatureValue] | None = None,
        omit: Sequence[str] = (),
    ) -> Signature:
        """The signature of this metric's values: model identities first, then every option
        that changes the number (in schema order), then run-time settings.

        >>> option = MetricOption("k", int, 1, "h")
        >>> spec = MetricSpec(name="m", compute=lambda b, o: None, description="d", options=(option,))
        >>> spec.signature({"k": 3}, {"model": "enc@abc"}).render().rsplit("|", 1)[0]
        'm|model:enc@abc|k:3'
        """
        values: dict[str, SignatureValue] = {}
        for key, identity in (models or {}).items():
            values[key] = identity
        for option in self.options:
            if not option.in_signature or option.name in values or option.name in omit:
                continue
            value = options.get(option.name, option.default)
            values[option.name] = value if value is not None else "auto"
        for key, value in (fields or {}).items():
            values[key] = value
        for distribution in self.backends or ():
            values.setdefault(distribution, backend_version(distribution))
        return Signature(self.name, values)


# --------------------------------------------------------------------------- the registry

_NEURAL_ROLES = ("encoder", "causal-lm", "nsp", "checkpoint")


def _default_backends(model: ModelRole | None) -> tuple[str, ...]:
    return ("transformers", "torch") if model in _NEURAL_ROLES else ()


@functools.cache
def backend_version(distribution: str) -> str:
    """The installed version of a library that computes numbers (``"absent"`` if missing).

    >>> backend_version("numpy") == __import__("numpy").__version__
    True
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "absent"


_NOT_METRIC_MODULES = {
    "cards",
    "registry",
    "pipeline",
    "context",
    "data",
    "function",
    "phrases",
    "divergence",
    "runs",
    "block_work",
    "aggregate",
    "files",
}
ENTRY_POINT_GROUP = "storyeval.metrics"


#: Built-in metrics registered outside this package: the trained models' metrics (UNION,
#: NUBIA, NSP, the preference model), imported by name so that this layer needs nothing of the
#: training code, and so that they exist in a source tree that was never installed (an entry
#: point exists only once the package is installed)
OTHER_BUILTIN_MODULES = ("storyeval.learn.metrics",)


def _import_builtin_metrics() -> None:
    """Import every module of ``storyeval.metrics`` and :data:`OTHER_BUILTIN_MODULES` (each
    registers its metrics)."""
    import storyeval.metrics as package

    for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not module.name.startswith("_") and module.name not in _NOT_METRIC_MODULES:
            importlib.import_module(f"{package.__name__}.{module.name}")
    for name in OTHER_BUILTIN_MODULES:
        importlib.import_module(name)


#: Every registered metric: the built-in modules, then the ``storyeval.metrics`` entry points.
METRICS: Registry[MetricSpec] = Registry(
    "metric",
    builtins=_import_builtin_metrics,
    entry_point_group=ENTRY_POINT_GROUP,
    error=UnknownMetricError,
)


def register_spec(spec: MetricSpec, *, replace: bool = False) -> MetricSpec:
    """Check a metric's entry and add it to the registry (what
    :func:`storyeval.metrics.function.metric` does with what it read of a function).

    Raises
    ------
    ValueError
        For a malformed name, inconsistent options, or a name another module registered
        (unless ``replace``).
    """
    name = spec.name
    if not name or not name.replace("_", "").isalnum() or not name.isascii():
        raise ValueError(f"metric names are made of [A-Za-z0-9_]; got {name!r}")
    option_names = [o.name for o in spec.options]
    if spec.system_statistics and "reference_system" not in option_names:
        raise ValueError(f"metric {name}: system statistics need an option reference_system")
    if len(set(option_names)) != len(option_names):
        raise ValueError(f"metric {name}: duplicate option names in {option_names}")
    for key in spec.field_options:
        if key not in option_names:
            raise ValueError(f"metric {name}: field option {key!r} is not in its options")
    existing = METRICS.registered(name)
    if existing is not None and not replace and existing.module != spec.module:
        raise ValueError(
            f"metric {name!r} is already registered by {existing.module}; pass replace=True"
        )
    METRICS.register(name, spec, replace=True)
    return spec


def unregister_metric(name: str) -> None:
    """Remove a metric (for tests and interactive experiments)."""
    METRICS.unregister(name)


def discover(*, force: bool = False) -> None:
    """Import every metric module and plug-in once (see the module docstring)."""
    METRICS.load(force=force)


def available_metrics() -> list[str]:
    """Every registered metric name, sorted."""
    return sorted(METRICS.names())


def all_metrics() -> list[MetricSpec]:
    """Every registered metric spec, sorted by name."""
    return [METRICS.get(name) for name in available_metrics()]


def families() -> dict[str, list[str]]:
    """Family name -> member metric names."""
    result: dict[str, list[str]] = {}
    for spec in all_metrics():
        for family in spec.families:
            result.setdefault(family, []).append(spec.name)
    return result


def get_metric(name: str) -> MetricSpec:
    """The spec of a registered metric; unknown names raise "must be one of ..."."""
    return METRICS.get(name)


def parse_metric_list(text: str | Sequence[str]) -> list[str]:
    """Split ``"bleu,rougeL"`` (or a list) into validated names, keeping order, no duplicates."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names: list[str] = []
    for item in items:
        name = item.strip()
        if not name:
            continue
        get_metric(name)
        if name not in names:
            names.append(name)
    if not names:
        raise UnknownMetricError(
            "no metric named; give one or more of " + ", ".join(available_metrics())
        )
    return names


def parse_option_assignments(assignments: Iterable[str]) -> dict[str, str]:
    """Turn ``["bertscore.layer=4", ...]`` into ``{"bertscore.layer": "4", ...}``.

    >>> parse_option_assignments(["bertscore.layer=4", "nsp.model=/tmp/nsp"])
    {'bertscore.layer': '4', 'nsp.model': '/tmp/nsp'}
    """
    result: dict[str, str] = {}
    for text in assignments:
        target, sep, value = text.partition("=")
        name, dot, key = target.strip().partition(".")
        if not sep or not dot or not name or not key:
            raise OptionError(
                f"option {text!r} must look like NAME.KEY=VALUE (e.g. bertscore.layer=4)"
            )
        result[f"{name}.{key}"] = value.strip()
    return result


def resolve_options(
    metrics: Sequence[str], options: Mapping[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Validate ``{"NAME.KEY": value}`` settings and return each metric's full option dict.

    ``NAME`` is a metric or a family. A family setting applies to every member that declares
    the key (and the key must belong to at least one member); a metric setting overrides a
    family setting. Unknown names and keys are errors, never ignored. Settings for
    registered metrics that are not in ``metrics`` are validated but have no effect.

    Raises
    ------
    OptionError
        For a malformed, unknown or invalid setting, naming the valid keys.
    """
    discover()
    options = dict(options or {})
    family_map = families()
    selected = {name: get_metric(name) for name in metrics}
    resolved = {name: spec.defaults() for name, spec in selected.items()}
    explicit: dict[str, set[str]] = {name: set() for name in selected}

    # family settings first, then metric settings override
    def specific(target: str) -> bool:
        name = target.split(".", 1)[0]
        return name in METRICS and name not in family_map

    for target, raw in sorted(options.items(), key=lambda item: specific(str(item[0]))):
        name, dot, key = str(target).partition(".")
        if not dot or not name or not key:
            raise OptionError(f"option {target!r} must look like NAME.KEY (e.g. bertscore.layer)")
        is_metric = specific(str(target))
        members = ([name] if name in METRICS else []) + [
            m for m in family_map.get(name, []) if m != name
        ]
        if not members:
            choices = sorted(set(METRICS.names()) | set(family_map))
            raise OptionError(
                f"option {target!r}: {name!r} is neither a metric nor a family; must be one of "
                + ", ".join(choices)
            )
        declaring = [m for m in members if key in METRICS[m].option_map]
        if not declaring:
            keys = sorted({k for m in members for k in METRICS[m].option_map})
            raise OptionError(
                f"unknown option {target!r}: {name} has "
                + (f"options {', '.join(keys)}" if keys else "no options")
            )
        for member in declaring:
            value = METRICS[member].option_map[key].parse(raw, where=str(target))
            if member in resolved and (is_metric or key not in explicit[member]):
                resolved[member][key] = value
                if is_metric:
                    explicit[member].add(key)
    for name, spec in selected.items():
        for option in spec.options:
            if option.required and option.name not in resolved[name]:
                raise OptionError(f"metric {name} needs option {name}.{option.name}: {option.help}")
    return resolved


def unused_options(metrics: Sequence[str], options: Mapping[str, Any] | None) -> list[str]:
    """Settings that apply to none of ``metrics`` (worth a warning)."""
    family_map = families()
    unused = []
    for target in options or {}:
        name, _, key = str(target).partition(".")
        members = ([name] if name in METRICS else []) + family_map.get(name, [])
        if not any(m in metrics and key in METRICS[m].option_map for m in members):
            unused.append(str(target))
    return unused
