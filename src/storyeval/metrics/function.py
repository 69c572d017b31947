"""Metrics as plain typed functions: the layer every other way of running a metric adapts.

A metric is written once, as a function over texts: data positional (``texts``,
``references``, ``prompts``, ``groups``, ``originals``), options keyword-only with their types,
defaults, bounds and help in the signature, models and the ``device`` as parameters, and a
named result type (a :class:`Scores` subclass) that carries the values, the per-text
sufficient statistics and the signature. :func:`metric` registers it: the registry's option
schema, the card facts, the CLI's ``--option NAME.KEY=VALUE`` and the pipeline's per-story
adapter are all generated from that one definition, so ``storyeval score``, the server, the
Dask engine and :mod:`storyeval.functional` run the same code and print the same number.

>>> from typing import Annotated
>>> @metric("toy_words", description="Words in the text, scaled.", value_range=(0.0, None),
...         higher_is_better=None, replace=True)
... def toy_words(texts: Texts, *, scale: Annotated[float, Opt("multiply by this", minimum=0)] = 1.0) -> Scores:
...     return Scores([len(t.split()) * scale for t in texts])
>>> result = toy_words(["a b c", "d"], scale=2)
>>> result.values.tolist(), result.signature.render().rsplit("|", 1)[0]
([6.0, 2.0], 'toy_words|scale:2.0')
>>> from storyeval.metrics.registry import get_metric, unregister_metric
>>> [o.describe() for o in get_metric("toy_words").options]
['scale (float, default 1.0): multiply by this']
>>> toy_words(["a"], scale=-1)
Traceback (most recent call last):
...
storyeval.metrics.registry.OptionError: option scale must be >= 0; got -1.0
>>> unregister_metric("toy_words")
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import numpy as np

from storyeval.base.signature import Signature, SignatureValue
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.registry import (
    MetricBatch,
    MetricOption,
    MetricOutput,
    MetricSpec,
    OptionError,
    get_metric,
    register_spec,
)

# --------------------------------------------------------------------------- input types

Texts = Sequence[str]
"""The texts scored (one value each)."""
References = Sequence[str] | Sequence[Sequence[str]]
"""One reference per text, or several (the best counts)."""
Prompts = Sequence[str]
"""One prompt per text."""
Groups = Sequence[str]
"""One group (system) per text, for metrics that compare a text with its group's others."""
Ids = Sequence[str]
"""One id per text, for metrics that write per-text files."""
Model = Any
"""A model option: a hub name, a local directory, ``None`` (the offline default) or a model
object already loaded (:func:`storyeval.models.load_encoder`, :func:`~storyeval.models.wrap_model`)."""

#: Positional parameter names and the story field each reads in the pipeline: every metric
#: calls the texts it scores ``texts``.
INPUTS = {
    "texts": "story",
    "references": "references",
    "prompts": "prompt",
    "groups": "system",
    "originals": "field",
    "ids": "id",
}
#: Keyword parameters that say where and how to compute, never options of the metric.
RESOURCES = ("scoring", "device", "precision", "progress")


@dataclass(frozen=True)
class Opt:
    """What an option's ``Annotated`` metadata tells the registry: its help, bounds, whether it
    changes the numbers, whether it names a model (loaded objects are accepted too)."""

    help: str
    minimum: float | None = None
    maximum: float | None = None
    in_signature: bool = True
    model: bool = False
    required: bool = False


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Scores:
    """One value per text, with its sufficient statistics and the signature reproducing it.

    Attributes
    ----------
    values : numpy array, shape (n,)
        One value per text, in input order; NaN where undefined.
    signature : Signature
        Every setting that changes the numbers (``signature.render()`` prints it).
    stats : numpy array, shape (n, k), optional
        Per-text sufficient statistics (summed or stacked, they give the corpus values).
    corpus_values : dict of str to float
        Corpus-level statistics of all texts as one corpus (e.g. ``corpus_bleu``).
    notes : tuple of str
        What the user should know (e.g. texts scored in windows).
    models, fields, omit
        Model identities, run-time settings and unused options, as the signature records them.
    """

    values: np.ndarray
    stats: np.ndarray | None = None
    models: Mapping[str, str] = field(default_factory=dict)
    fields: Mapping[str, SignatureValue] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    omit: tuple[str, ...] = ()
    signature: Signature = field(default_factory=lambda: Signature("unsigned"))
    corpus_values: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", np.asarray(self.values, dtype=np.float64))
        if self.stats is not None:
            object.__setattr__(self, "stats", np.asarray(self.stats, dtype=np.float64))
        object.__setattr__(self, "notes", tuple(self.notes))

    def __len__(self) -> int:
        return len(self.values)

    def mean(self) -> float:
        """The mean over the texts with a defined value (NaN when there is none)."""
        finite = self.values[~np.isnan(self.values)]
        return float(finite.mean()) if len(finite) else math.nan

    def frame(self) -> Any:
        """The values as a tidy DataFrame (``index, value, signature``)."""
        import pandas as pd

        rendered = self.signature.render()
        return pd.DataFrame(
            {"index": range(len(self)), "value": self.values, "signature": rendered}
        )


R = TypeVar("R", bound=Scores)


def undefined_note(values: np.ndarray, why: str) -> list[str]:
    """``["N texts ...: undefined"]`` when some values are NaN, else ``[]``."""
    count = int(np.isnan(np.asarray(values, dtype=np.float64)).sum())
    return [f"{count} {why}: undefined"] if count else []


# --------------------------------------------------------------------------- the decorator

F = TypeVar("F", bound=Callable[..., Any])


class _Injected:
    """The default of a metric function's ``scoring`` parameter: the wrapper :func:`metric`
    returns always passes a real :class:`ScoringContext` in its place."""

    def __repr__(self) -> str:
        return "INJECTED"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{name}: the metric function was called unwrapped, without a context")


#: Write ``scoring: ScoringContext = INJECTED``: the body receives the caller's context or a
#: new one on the given device, never nothing.
INJECTED: ScoringContext = _Injected()  # type: ignore[assignment]


def metric_function(name: str) -> Callable[..., Any]:
    """The typed function of the registered metric ``name``.

    >>> metric_function("bleu").__name__
    'bleu'
    """
    function = get_metric(name).function  # unknown names raise with the choices
    if function is None:
        raise KeyError(f"the metric {name} was registered without a typed function")
    return function


@dataclass(frozen=True)
class MetricFunction:
    """What :func:`metric` learned of a function: its inputs, options and model options."""

    name: str
    inputs: tuple[str, ...]
    optional_inputs: frozenset[str]
    options: tuple[MetricOption, ...]
    model_options: tuple[str, ...]
    resources: tuple[str, ...]
    result: type[Scores]
    field_option: str | None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


def metric(
    name: str | None = None,
    *,
    fixed: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    doc: str | None = None,
    extra_options: Sequence[MetricOption] = (),
    replace: bool = False,
    **facts: Any,
) -> Callable[[F], F]:
    """Register a typed metric function (see the module docstring) and return it, wrapped so
    that a call validates its inputs and options, loads models once, and signs its result.

    The registry entry is generated from the function: the inputs it reads (a ``references``
    parameter means it needs a reference; ``prompts`` a prompt, unless it defaults to None;
    ``originals`` a field named by the metric's option ``original``), its keyword-only options
    (``Annotated[type, Opt(help, ...)]``; ``Literal`` gives the choices) and the result type.
    ``facts`` are the :class:`~storyeval.metrics.registry.MetricFacts` (``description`` is
    required; direction, range, level, families, card, ...).

    A family is one function registered under several names: ``fixed`` binds keyword
    parameters that tell the members apart (``{"component": "p"}``), which are then no options
    of the registered metric; ``defaults`` gives options another default (``bleu1`` is
    ``bleu`` with ``{"max_order": 1}``); ``doc`` is the member's docstring. ``extra_options`` are
    options of the registered metric with no parameter of their own (rare: a setting the
    command line needs that the function takes another way).
    """

    def decorate(function: F) -> F:
        described = describe_function(
            function, name or function.__name__, extra_options, fixed or {}, defaults or {}
        )
        spec = MetricSpec(
            name=described.name,
            compute=_batch_adapter(function, described),
            needs_reference="references" in described.inputs,
            needs_prompt="prompts" in described.inputs
            and "prompts" not in described.optional_inputs,
            field_options=(described.field_option,) if described.field_option else (),
            options=(*described.options, *extra_options),
            module=getattr(function, "__module__", ""),
            **facts,
        )
        wrapper = _public(function, described, spec.option_map)
        wrapper.__metric__ = described  # type: ignore[attr-defined]
        if function.__name__.startswith("_") or fixed or defaults:  # a family's member
            wrapper.__name__ = wrapper.__qualname__ = described.name
        if doc:
            wrapper.__doc__ = doc
        register_spec(dataclasses.replace(spec, function=wrapper), replace=replace)
        return wrapper  # type: ignore[return-value]

    return decorate


def describe_function(
    function: Callable[..., Any],
    name: str,
    extra_options: Sequence[MetricOption] = (),
    fixed: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> MetricFunction:
    """Read a metric function's inputs and options from its signature (``extra_options``: the
    registered metric's options that are no parameter of the function; ``fixed``: keyword
    parameters bound for this registered name, which are no options; ``defaults``: options'
    defaults for this registered name)."""
    fixed, defaults = dict(fixed or {}), dict(defaults or {})
    namespace = {"ScoringContext": ScoringContext}
    hints = typing.get_type_hints(function, localns=namespace, include_extras=True)
    signature = inspect.signature(function)
    inputs: list[str] = []
    optional: set[str] = set()
    options: list[MetricOption] = []
    models: list[str] = []
    resources: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            if parameter.name not in INPUTS:
                raise TypeError(
                    f"metric {name}: positional parameter {parameter.name!r} is not one of "
                    + ", ".join(INPUTS)
                )
            inputs.append(parameter.name)
            if parameter.default is None:
                optional.add(parameter.name)
        elif parameter.kind == parameter.KEYWORD_ONLY:
            if parameter.name in fixed:
                continue
            if parameter.name in RESOURCES:
                _check_resource(name, parameter)
                resources.append(parameter.name)
                continue
            option, is_model = _option(name, parameter, hints.get(parameter.name))
            options.append(option)
            if is_model:
                models.append(parameter.name)
        else:
            raise TypeError(f"metric {name}: *args and **kwargs are not allowed")
    result = hints.get("return", Scores)
    if not (isinstance(result, type) and issubclass(result, Scores)):
        raise TypeError(f"metric {name}: the return annotation must be a Scores subclass")
    if not inputs or inputs[0] != "texts":
        raise TypeError(f"metric {name}: the first parameter must be `texts`, the texts scored")
    unknown = sorted(set(fixed) - set(signature.parameters))
    if unknown:
        raise TypeError(f"metric {name}: fixed parameters {unknown} are not in the signature")
    if set(defaults) - {o.name for o in options}:
        raise TypeError(f"metric {name}: defaults {sorted(defaults)} must name its options")
    options = [replace(o, default=defaults.get(o.name, o.default)) for o in options]
    field_option = "original" if "originals" in inputs else None
    if field_option and field_option not in [o.name for o in [*options, *extra_options]]:
        raise TypeError(f"metric {name}: reading originals needs an option 'original'")
    return MetricFunction(
        name,
        tuple(inputs),
        frozenset(optional),
        tuple(options),
        tuple(models),
        tuple(resources),
        result,
        field_option,
        fixed,
        defaults,
    )


def _check_resource(name: str, parameter: inspect.Parameter) -> None:
    """``scoring`` must default to :data:`INJECTED` (the body always gets a context)."""
    if parameter.name == "scoring" and parameter.default is not INJECTED:
        raise TypeError(f"metric {name}: write `scoring: ScoringContext = INJECTED`")


def _option(metric_name: str, parameter: inspect.Parameter, hint: Any) -> tuple[MetricOption, bool]:
    """The :class:`MetricOption` of a keyword-only parameter, and whether it names a model."""
    if parameter.default is inspect.Parameter.empty:
        raise TypeError(f"metric {metric_name}: option {parameter.name!r} needs a default")
    meta = Opt(help=parameter.name)
    base = hint
    if get_origin(hint) is Annotated:
        base, *extras = get_args(hint)
        meta = next((e for e in extras if isinstance(e, Opt)), meta)
    kind, choices = _base_type(base)
    if meta.model:
        kind, choices = str, None
    option = MetricOption(
        parameter.name,
        kind,
        parameter.default,
        meta.help,
        choices=choices,
        minimum=meta.minimum,
        maximum=meta.maximum,
        in_signature=meta.in_signature,
        required=meta.required,
    )
    return option, meta.model


def _base_type(hint: Any) -> tuple[type, tuple[Any, ...] | None]:
    """The option type (bool, int, float or str) of an annotation and its ``Literal`` choices."""
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not type(None)]
        if len(members) == 1:
            return _base_type(members[0])
        return str, None
    if origin is Literal:
        values = get_args(hint)
        kinds = {type(v) for v in values}
        kind = kinds.pop() if len(kinds) == 1 else str
        return kind, tuple(values)
    if hint in (bool, int, float, str):
        return hint, None
    return str, None


# --------------------------------------------------------------------------- calling


def _public(
    function: Callable[..., Any], described: MetricFunction, schema: Mapping[str, MetricOption]
) -> Callable[..., Any]:
    """The function users call: inputs checked, options parsed and checked against the
    schema, models given as objects registered, the scoring context injected (the caller's
    or a new one), the family's fixed parameters bound, the result signed."""
    signature = inspect.signature(function)
    public = [
        p.replace(default=described.defaults[p.name]) if p.name in described.defaults else p
        for p in signature.parameters.values()
        if p.name not in described.fixed
    ]
    shown = signature.replace(parameters=public)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        _refuse_unknown(described.name, kwargs, shown, schema)
        bound = shown.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        n = _check_inputs(described, values)
        scoring = _context(values)
        for key in described.model_options:
            if values[key] is None and schema[key].required:
                raise OptionError(f"{described.name} needs {key}: {schema[key].help}")
            values[key] = scoring.use(values[key])
        for option in described.options:
            if option.name not in described.model_options:
                values[option.name] = schema[option.name].parse(
                    values[option.name], where=option.name
                )
        values["scoring"] = scoring
        for key in RESOURCES:
            if key not in described.resources:
                values.pop(key, None)
        result = function(**values, **described.fixed)
        if len(result.values) != n:
            raise RuntimeError(f"{described.name} returned {len(result.values)} values for {n}")
        return sign(described.name, result, values, scoring)

    call.__signature__ = shown  # type: ignore[attr-defined]
    return call


def _refuse_unknown(
    name: str,
    kwargs: Mapping[str, Any],
    signature: inspect.Signature,
    schema: Mapping[str, MetricOption],
) -> None:
    """An option the function does not take is an error naming what it is, never ignored."""
    for key in kwargs:
        if key in signature.parameters:
            continue
        if key in schema:  # a registered option the per-text function has no use for
            raise OptionError(
                f"{name}: option {key!r} is not an option of this function: it applies where "
                f"`storyeval score` reads story records or compares systems (--option "
                f"{name}.{key}=...); the function's options are "
                + ", ".join(p for p in signature.parameters if p not in INPUTS)
            )
        raise OptionError(
            f"{name}: unknown option {key!r}; the options are "
            + ", ".join(p for p in signature.parameters if p not in INPUTS)
        )


def _check_inputs(described: MetricFunction, values: dict[str, Any]) -> int:
    """Check the data arguments (sequences of strings of one length); returns the length and
    turns ``references`` into one list of references per text."""
    name = described.name
    texts = _strings(name, values[described.inputs[0]], described.inputs[0])
    if not texts:
        raise ValueError(f"{name}: no text to score")
    values[described.inputs[0]] = texts
    for key in described.inputs[1:]:
        if values.get(key) is None:
            if key not in described.optional_inputs:
                raise ValueError(f"{name}: {key} are needed")
            continue
        if key == "references":
            values[key] = reference_lists(name, values[key], len(texts))
        else:
            values[key] = _strings(name, values[key], key)
            if len(values[key]) != len(texts):
                raise ValueError(f"{name}: {len(texts)} texts but {len(values[key])} {key}")
    return len(texts)


def _strings(name: str, values: Any, what: str) -> list[str]:
    if isinstance(values, str):
        raise TypeError(f"{name}: {what} must be a sequence of strings, not one string")
    texts = list(values)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}: {what}[{index}] is {type(text).__name__}, not str")
    return texts


def reference_lists(name: str, references: Any, n: int) -> list[list[str]]:
    """One list of references per text, checked (a string per text is one reference)."""
    if isinstance(references, str):
        raise TypeError(f"{name}: references must be a sequence, not one string")
    rows = list(references)
    if len(rows) != n:
        raise ValueError(f"{name}: {n} texts but {len(rows)} references")
    result = []
    for index, row in enumerate(rows):
        refs = [row] if isinstance(row, str) else list(row)
        if not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"{name}: references[{index}] must be a string or strings")
        result.append(refs)
    return result


def _context(values: dict[str, Any]) -> ScoringContext:
    """The given context, or a new one on the given device and precision."""
    given = values.get("scoring")
    device, precision = values.get("device"), values.get("precision")
    if given is not None and given is not INJECTED:
        if device is not None and device != given.device:
            raise ValueError(f"device {device!r} differs from the given context's {given.device!r}")
        return given  # type: ignore[no-any-return]
    return ScoringContext(
        device=device or "cpu",
        precision=precision or "float32",
        progress=bool(values.get("progress")),
    )


def sign(name: str, result: R, options: Mapping[str, Any], scoring: ScoringContext) -> R:
    """``result`` with its signature and corpus statistics (as the pipeline computes them)."""
    from storyeval.metrics.runs import NEURAL_ROLES

    spec = get_metric(name)
    fields = dict(result.fields)
    if spec.model in NEURAL_ROLES:
        for key, value in scoring.compute_fields().items():
            fields.setdefault(key, value)
    signature = spec.signature(options, result.models, fields, result.omit)
    corpus: dict[str, float] = {}
    if result.stats is not None and len(result.stats) and spec.corpus:
        corpus = {s.name: float(s.compute(result.stats, options)) for s in spec.corpus}
    return replace(result, signature=signature, corpus_values=corpus)


def call_metric(
    name: str,
    texts: Sequence[str],
    references: Any = None,
    *,
    prompts: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    originals: Sequence[str] | None = None,
    ids: Sequence[str] | None = None,
    **options: Any,
) -> Scores:
    """The registered metric ``name`` on ``texts``, with its options as keywords; the inputs it
    does not read are ignored, one it needs and lacks is an error.

    >>> call_metric("distinct1", ["the cat and the dog"]).values.tolist()
    [0.8]
    """
    function = metric_function(name)
    described: MetricFunction = function.__metric__  # type: ignore[attr-defined]
    given = {"references": references, "prompts": prompts, "groups": groups}
    given.update(originals=originals, ids=ids)
    arguments: list[Any] = [texts]
    for key in described.inputs[1:]:
        if given.get(key) is None and key not in described.optional_inputs:
            raise ValueError(f"{name} needs {key}")
        arguments.append(given.get(key))
    result: Scores = function(*arguments, **options)
    return result


# --------------------------------------------------------------------------- the pipeline's adapter


def _batch_adapter(
    function: Callable[..., Any], described: MetricFunction
) -> Callable[[MetricBatch, Mapping[str, Any]], MetricOutput]:
    """The registry's ``compute(batch, options)``: the function on the batch's stories."""

    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        stories = batch.stories
        arguments: dict[str, Any] = {}
        for key in described.inputs:
            arguments[key] = story_inputs(stories, key, options)
        for option in described.options:
            arguments[option.name] = options[option.name]
        for key in described.resources:  # e.g. an option "precision" overriding the run's
            if key != "scoring" and options.get(key) is not None:
                arguments[key] = options[key]
        if "scoring" in described.resources:
            arguments["scoring"] = batch.context
        result: Scores = function(**arguments, **described.fixed)
        return MetricOutput(
            result.values,
            result.stats,
            dict(result.models),
            dict(result.fields),
            list(result.notes),
            tuple(result.omit),
        )

    compute.__module__ = function.__module__  # where the metric is written (the registry says)
    compute.__name__ = f"{described.name}_on_stories"
    compute.__doc__ = f"``{described.name}`` on a batch of stories (the pipeline's adapter)."
    return compute


def story_inputs(stories: Sequence[Any], key: str, options: Mapping[str, Any]) -> list[Any]:
    """What a metric's input parameter ``key`` reads from each story."""
    if INPUTS.get(key) == "story":
        return [s.story for s in stories]
    if key == "references":
        return [list(s.references) for s in stories]
    if key == "prompts":
        return [s.prompt for s in stories]
    if key == "groups":
        return [s.system or "(none)" for s in stories]
    if key == "ids":
        return [s.id for s in stories]
    if key == "originals":
        name = str(options["original"])
        return [str(s.to_dict().get(name) or "") for s in stories]
    raise KeyError(key)


def check(condition: bool, message: str) -> None:
    """Raise :class:`~storyeval.metrics.registry.OptionError` with ``message`` unless
    ``condition`` holds (for checks of several options together)."""
    if not condition:
        raise OptionError(message)
