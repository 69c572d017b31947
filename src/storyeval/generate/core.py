"""Generating continuations of prompts with a causal LM.

Every generated story carries a signature of the model and every decoding setting, so a run
can be repeated exactly: same inputs, seed and batch size give the same stories on a CPU.

Few-shot priming follows Clark (2021) (§6.2.2, after Brown et al. 2020): the model reads three
in-domain human-authored texts, each followed by an end-of-text marker, then the prompt.
Generated texts that copy a priming text (more than 80% overlap) or contain a listed offensive
word are dropped and generated again, and each story records how often that happened.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from storyeval.base.errors import StoryevalError
from storyeval.base.registry import Registry
from storyeval.base.signature import Signature
from storyeval.corpus import RESERVED_FIELDS, Story
from storyeval.engine.blocks import Executor
from storyeval.generate.filters import COPY_THRESHOLD, WordListFilter, max_copy_overlap
from storyeval.text import count_words, split_sentences, truncate

DEFAULT_MAX_ATTEMPTS = 10
DROP_FIELDS = (
    "dropped_empty",
    "dropped_unfinished",
    "dropped_long",
    "dropped_copy",
    "dropped_offensive",
)
_TERMINAL = re.compile(r"[.!?…][\"'”’)\]]*$")


class GenerationError(StoryevalError, RuntimeError):
    """No usable continuation could be generated (every attempt was empty or filtered)."""


@dataclass(frozen=True)
class DecodingConfig:
    """Decoding settings passed to ``model.generate``.

    ``do_sample=False`` is greedy decoding; otherwise ``temperature``, ``top_k`` and
    ``top_p`` shape the sampling distribution (``None`` disables a filter).

    Examples
    --------
    >>> DecodingConfig(top_k=40, temperature=0.7).describe()
    'k40-t0.7'
    >>> DecodingConfig.from_options(greedy=True).describe()
    'greedy'
    """

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    max_new_tokens: int = 160
    #: Beam search (deterministic; Clark 2021, Table 5.4, used 5 beams): 1 is greedy
    num_beams: int = 1

    def __post_init__(self) -> None:
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be >= 1; got {self.num_beams}")
        if self.num_beams > 1 and self.do_sample:
            raise ValueError("beam search does not sample: use it with greedy decoding")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0; got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1; got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0; got {self.repetition_penalty}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")

    @classmethod
    def from_options(
        cls,
        *,
        greedy: bool = False,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float = 1.0,
        max_new_tokens: int = 160,
        beams: int = 1,
    ) -> DecodingConfig:
        """Build a config from command-line style options, rejecting contradictory ones.

        ``greedy`` (and ``beams`` > 1, which implies it) cannot be combined with
        ``temperature``, ``top_k`` or ``top_p``.
        """
        if (greedy or beams > 1) and (
            temperature is not None or top_k is not None or top_p is not None
        ):
            what = "beam search" if beams > 1 else "greedy decoding"
            raise ValueError(f"{what} takes no temperature, top_k or top_p")
        greedy = greedy or beams > 1
        if greedy:
            return cls(
                do_sample=False,
                repetition_penalty=repetition_penalty,
                max_new_tokens=max_new_tokens,
                num_beams=beams,
            )
        return cls(
            do_sample=True,
            temperature=1.0 if temperature is None else temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            max_new_tokens=max_new_tokens,
        )

    def generate_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``model.generate`` for these settings."""
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.do_sample,
        }
        if self.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = self.repetition_penalty
        if self.do_sample:
            kwargs["temperature"] = self.temperature
            kwargs["top_k"] = self.top_k if self.top_k is not None else 0
            kwargs["top_p"] = self.top_p if self.top_p is not None else 1.0
        else:  # silence the model's own sampling defaults
            kwargs.update(temperature=None, top_k=None, top_p=None)
        if self.num_beams > 1:
            kwargs.update(num_beams=self.num_beams, early_stopping=True)
        return kwargs

    def describe(self) -> str:
        """A short label such as ``greedy``, ``p0.9`` or ``k40-t0.7``."""
        if not self.do_sample:
            return ("greedy" if self.num_beams == 1 else f"beam{self.num_beams}") + (
                f"-rp{self.repetition_penalty:g}" if self.repetition_penalty != 1.0 else ""
            )
        parts = []
        if self.top_k is not None:
            parts.append(f"k{self.top_k}")
        if self.top_p is not None:
            parts.append(f"p{self.top_p:g}")
        if self.temperature != 1.0:
            parts.append(f"t{self.temperature:g}")
        if self.repetition_penalty != 1.0:
            parts.append(f"rp{self.repetition_penalty:g}")
        return "-".join(parts) or "sample"

    def signature_fields(self) -> dict[str, Any]:
        """The settings that change the generated texts, for the signature (``num_beams``
        only when beam search is on, so greedy and sampled runs sign as before)."""
        fields = dict(asdict(self))
        if self.num_beams == 1:
            del fields["num_beams"]
        return fields


def clean_continuation(
    text: str,
    *,
    max_words: int | None = None,
    max_chars: int | None = None,
    max_sentences: int | None = None,
) -> str:
    """Normalise whitespace, cut to the cap at a sentence end, and drop an unfinished last
    sentence (generation stops mid-sentence when it runs out of tokens).

    ``max_sentences`` keeps at most that many leading sentences (the machine-in-the-loop
    writer receives one sentence at a time).

    >>> clean_continuation("  It rained.\\n\\nThe roof leaked and")
    'It rained.'
    >>> clean_continuation("It rained. The roof leaked. We left.", max_sentences=2)
    'It rained. The roof leaked.'
    """
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences must be >= 1; got {max_sentences}")
    text = re.sub(r"\s+", " ", text).strip()
    sentences = split_sentences(text)
    while len(sentences) > 1 and not _TERMINAL.search(sentences[-1]):
        sentences.pop()
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    text = " ".join(sentences)
    if text and (max_words is not None or max_chars is not None):
        text = truncate(text, max_words=max_words, max_chars=max_chars)
    return text


def default_separator(tokenizer: Any) -> str:
    """The end-of-text marker that separates priming texts: the tokenizer's document
    separator ``<|endoftext|>`` when it has one as a special token (GPT-2, SmolLM2), else its
    end-of-sequence token."""
    special = set(getattr(tokenizer, "all_special_tokens", []) or [])
    if "<|endoftext|>" in special:
        return "<|endoftext|>"
    eos = getattr(tokenizer, "eos_token", None)
    if not eos:
        raise ValueError("the tokenizer has no end-of-text token; pass separator= explicitly")
    return str(eos)


def build_context(prompt: str, priming: Sequence[str] = (), separator: str = "") -> str:
    """The text the model continues: each priming text followed by ``separator``, then the
    prompt (Clark 2021 §6.2.2 delimits the texts with an end-of-sequence token).

    >>> build_context("Once upon a time", ["A tale.", "Another tale."], "<|endoftext|>")
    'A tale.<|endoftext|>Another tale.<|endoftext|>Once upon a time'
    """
    if priming and not separator:
        raise ValueError("priming texts need a separator")
    return "".join(text.strip() + separator for text in priming) + prompt.rstrip()


def _stop_ids(tokenizer: Any, separator: str | None) -> list[int]:
    ids = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if separator:
        encoded = tokenizer(separator, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.append(int(encoded[0]))
    return sorted(set(ids))


class _SeededSampler:
    """The last logits processor of a sampling run: draws each next token with a private
    ``torch.Generator`` (from the softmax of the warped scores, as ``generate`` itself does)
    and leaves only that token possible, so ``generate`` in greedy mode takes it. The output
    equals sampling with ``generate`` after ``torch.manual_seed(seed)``, but concurrent runs
    do not share the global random state, so they need no lock and never wait for each
    other."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        # drawn where the scores are, with the private generator (a generator of the model's
        # device: no copy of the probabilities to the host at every step)
        probs = torch.nn.functional.softmax(scores.float(), dim=-1)
        if probs.device != self.generator.device:
            probs = probs.to(self.generator.device)
        chosen = torch.multinomial(probs, num_samples=1, generator=self.generator)
        # in place: no new vocabulary-sized tensor at every step
        return scores.fill_(float("-inf")).scatter_(1, chosen.to(scores.device), 0.0)


def device_generator(generator: Any, device: Any) -> Any:
    """A private generator on ``device`` seeded from ``generator`` (itself when ``device`` is
    the CPU): sampling on a GPU then stays on the GPU, and the same seed draws the same
    stories on the same kind of device."""
    import torch

    if str(device).startswith("cpu") or str(getattr(generator, "device", "cpu")) == str(device):
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    made = torch.Generator(device=device)
    made.manual_seed(seed)
    return made


def _warpers(decoding: DecodingConfig) -> list[Any]:
    """The sampling warpers ``generate`` would add, in its order (temperature, top-k, top-p)."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers: list[Any] = []
    if decoding.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(decoding.temperature))
    if decoding.top_k is not None and decoding.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=decoding.top_k, min_tokens_to_keep=1))
    if decoding.top_p is not None and decoding.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=decoding.top_p, min_tokens_to_keep=1))
    return warpers


def block_seed(seed: int, block: int) -> int:
    """The seed of block ``block`` of a generation run: ``seed`` for the first block (so a
    run of one block draws what it always drew), a mix of both for the others.

    >>> block_seed(7, 0), block_seed(7, 1) != block_seed(7, 2)
    (7, True)
    """
    if block == 0:
        return seed
    return (seed * 1_000_003 + block * 97_531) % (2**63)


def seeded_generator(seed: int) -> Any:
    """A private random generator for one generation run."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def generate_raw(
    lm: Any,
    contexts: Sequence[str],
    decoding: DecodingConfig,
    *,
    separator: str | None,
    generator: Any,
    precision: str = "float32",
) -> list[str]:
    """One batch of raw continuations (no cleaning), cut at the first stop token; sampling
    draws from ``generator`` (see :class:`_SeededSampler`). The model runs where its
    parameters are, its matrix products in ``precision``."""
    import torch
    from transformers import LogitsProcessorList

    from storyeval.models.devices import autocast, model_device

    if hasattr(lm, "generate_texts"):  # a storyeval model (ENGEN) that samples word by word
        return list(lm.generate_texts(contexts, decoding, generator=generator))
    tokenizer, model = lm.tokenizer, lm.model
    device = model_device(lm)
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    stop = _stop_ids(tokenizer, separator)
    encoded = tokenizer(list(contexts), return_tensors="pt", padding=True, padding_side="left")
    encoded = encoded.to(device)
    kwargs = decoding.generate_kwargs()
    processors = LogitsProcessorList()
    if decoding.do_sample:
        processors.extend(_warpers(decoding))
        processors.append(_SeededSampler(device_generator(generator, device)))
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    with torch.no_grad(), autocast(str(device), precision):
        output = model.generate(
            **encoded,
            **kwargs,
            pad_token_id=pad_id,
            eos_token_id=stop or None,
            logits_processor=processors,
        )
    new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
    texts = []
    for tokens in new_tokens:
        for position, token in enumerate(tokens):
            if token in stop:
                tokens = tokens[:position]
                break
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if separator and separator in text:  # a multi-token separator string
            text = text.split(separator, 1)[0]
        texts.append(text)
    return texts


@dataclass(frozen=True)
class GeneratorKind:
    """A kind of model ``generate_stories`` runs besides transformers causal LMs: whether a
    name or directory is one (``accepts``) and how to load it (``load``)."""

    accepts: Callable[[str | None], bool]
    load: Callable[[str], Any]


#: The kinds of generator beside causal LMs: ENGEN (:mod:`storyeval.tuning.engen_generate`, imported by
#: name, so this layer needs nothing of the training code), then the entry points of the group
#: ``storyeval.generators``; anything else is a causal LM.
GENERATORS: Registry[GeneratorKind] = Registry(
    "generator",
    builtins=("storyeval.tuning.engen_generate",),
    entry_point_group="storyeval.generators",
)


def load_generator(model: str | None) -> Any:
    """The model ``generate_stories`` runs: a directory of a registered kind (ENGEN, from
    ``storyeval train engen``) or any causal LM (hub name, local directory, or the offline
    default)."""
    from storyeval.models import load_causal_lm

    GENERATORS.load()
    for _name, kind in GENERATORS.items():
        if model is not None and kind.accepts(model):
            return kind.load(model)
    return load_causal_lm(model, option="--model")


def _check_context_length(lm: Any, contexts: Sequence[tuple[str, str]], max_new: int) -> None:
    limit = lm.max_length
    for label, context in contexts:
        length = len(lm.tokenizer(context, add_special_tokens=False)["input_ids"])
        if length + max_new > limit:
            raise ValueError(
                f"{label}: the prompt (with priming texts) is {length} tokens and "
                f"max_new_tokens is {max_new}; together they exceed the model's limit of {limit}"
            )


def _priming_identity(priming: Sequence[str]) -> str | None:
    if not priming:
        return None
    digest = hashlib.sha256("\x1e".join(t.strip() for t in priming).encode()).hexdigest()
    return digest[:12]


@dataclass
class _Job:
    record: Story
    n: int
    context: str
    attempts: int = 0
    dropped: dict[str, int] = field(
        default_factory=lambda: {"empty": 0, "unfinished": 0, "long": 0, "copy": 0, "offensive": 0}
    )
    last_reason: str = ""
    text: str | None = None
    overlap: float | None = None


def _judge(
    raw: str,
    *,
    max_words: int | None,
    max_chars: int | None,
    max_sentences: int | None,
    priming: Sequence[str],
    copy_threshold: float,
    word_filter: WordListFilter | None,
) -> tuple[str | None, str, float | None]:
    """Clean one raw output and return ``(text or None, drop reason, copy overlap)``."""
    text = clean_continuation(raw, max_sentences=max_sentences)
    if not re.search(r"\w", text):
        return None, "empty", None
    if not _TERMINAL.search(text):
        return None, "unfinished", None  # not one complete sentence
    if max_words is not None or max_chars is not None:
        first = split_sentences(text)[0]
        size = count_words(first) if max_words is not None else len(first)
        if size > (max_words if max_words is not None else max_chars):  # type: ignore[operator]
            return None, "long", None  # cannot be cut at a sentence end within the cap
        text = truncate(text, max_words=max_words, max_chars=max_chars)
    overlap = max_copy_overlap(text, priming) if priming else None
    if overlap is not None and overlap > copy_threshold:
        return None, "copy", overlap
    if word_filter is not None:
        found = word_filter.find(text)
        if found:
            return None, "offensive", overlap
    return text, "", overlap


def generate_on(executor: Executor, *, block_size: int, **settings: Any) -> list[Story]:
    """Generate from the prompts an executor holds: block ``k`` of ``block_size`` prompts
    with the random stream of :func:`block_seed` ``(seed, k)``, wherever it runs, so every
    engine gives the same stories. ``settings`` are the keyword arguments of
    :func:`generate_stories`."""
    from storyeval.engine.blocks import consecutive_blocks

    blocks = consecutive_blocks(executor.n_stories, block_size)
    shared = {**settings, "block_size": block_size}
    parts = executor.map_blocks(generate_block, blocks, shared, label="prompt blocks")
    return [story for part in parts for story in part]


def generate_block(prompts: list[Story], block: int, settings: dict[str, Any]) -> list[Story]:
    """Generate the continuations of one block of prompts where the executor runs it."""
    return generate_stories(prompts, block=block, **settings)


def generate_stories(
    prompts: Sequence[Story],
    *,
    model: str | None = None,
    decoding: DecodingConfig | None = None,
    num_stories: int = 1,
    seed: int = 0,
    batch_size: int = 8,
    max_words: int | None = None,
    max_chars: int | None = None,
    system: str | None = None,
    progress: bool = True,
    priming: Sequence[str] = (),
    separator: str | None = None,
    copy_threshold: float = COPY_THRESHOLD,
    word_filter: WordListFilter | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    device: str = "cpu",
    precision: str = "float32",
    block_size: int | None = None,
    block: int = 0,
) -> list[Story]:
    """Continue each prompt ``num_stories`` times.

    Parameters
    ----------
    prompts : sequence of Story
        Records with ``id`` and a non-empty ``prompt`` (see
        :func:`storyeval.generate.read_prompts`); ``reference`` and extra fields are carried
        over to the generated stories.
    model : str, optional
        A causal LM name or local path; the offline SmolLM2 by default.
    decoding : DecodingConfig, optional
        Greedy or sampling settings and ``max_new_tokens``; pure sampling at temperature 1 by
        default.
    num_stories : int
        Continuations per prompt.
    seed : int
        Seeds torch's generator once before the first batch.
    batch_size : int
        Prompts per ``generate`` call (left-padded). Part of the signature: padding changes
        the arithmetic slightly, so another batch size can give other stories.
    max_words, max_chars : int, optional
        Cut each story to the longest run of whole sentences within the cap (Karpinska et al. 2021 cuts
        at 150 words, Callan and Foster (2023) at 400 characters). An unfinished last sentence is always
        dropped, and a story without one complete sentence is generated again (counted in
        ``dropped_unfinished``); a story whose first sentence alone exceeds the cap is dropped and
        generated again (counted in ``dropped_long``), so every story ends at a full
        sentence.
    priming : sequence of str
        Few-shot priming texts (Clark 2021 uses three), each followed by ``separator`` before
        the prompt.
    separator : str, optional
        The end-of-text marker; :func:`default_separator` of the model by default.
    copy_threshold : float
        With priming, a story whose :func:`~storyeval.generate.copy_overlap` with a priming
        text exceeds this is dropped and generated again (0.8 as in Clark (2021)).
    word_filter : WordListFilter, optional
        A story containing a listed term is dropped and generated again.
    max_attempts : int
        Generations allowed per story before :class:`GenerationError` is raised.
    device, precision : str
        Where the model runs and the precision of its matrix products (in the signature).
    block_size : int, optional
        Generate blocks of this many prompts, block ``k`` with the random stream of
        :func:`block_seed` ``(seed, k)`` (block 0: ``seed`` itself), so that an engine that
        generates the blocks apart (Dask) gives the same stories; in the signature.
    block : int
        The index of the block these prompts are (for an engine generating one block).

    Returns
    -------
    list of Story
        One per continuation, prompt-major, with ``id`` ``{prompt_id}-{system}-{n}``
        (``-{n}`` only when ``num_stories > 1``), the prompt, the prompt record's reference,
        ``system``, and extra fields ``prompt_id``, ``signature`` (the model identity and
        every setting above), ``attempts``, ``dropped_empty``, ``dropped_unfinished``,
        ``dropped_long``, ``dropped_copy``, ``dropped_offensive`` and, with priming, ``copy_overlap`` of the kept story.

    Raises
    ------
    GenerationError
        If some story had no usable continuation after ``max_attempts`` generations, or
        greedy decoding produced a filtered text (greedy regeneration repeats it).
    ValueError
        On empty prompts, bad settings, or a prompt too long for the model.
    """
    _check_settings(
        prompts, num_stories, batch_size, max_attempts, copy_threshold, max_words, max_chars
    )
    settings = _Settings(
        model=model,
        decoding=decoding or DecodingConfig(),
        num_stories=num_stories,
        seed=seed,
        batch_size=batch_size,
        max_words=max_words,
        max_chars=max_chars,
        system=system,
        progress=progress,
        priming=[text.strip() for text in priming if text.strip()],
        separator=separator,
        copy_threshold=copy_threshold,
        word_filter=word_filter,
        max_attempts=max_attempts,
        device=device,
        precision=precision,
    )
    if block_size is not None and len(prompts) > block_size:  # the local engine: block by block
        from storyeval.engine.blocks import LocalExecutor

        fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        return generate_on(LocalExecutor(prompts), block_size=block_size, **fields)
    return _generate(prompts, settings, block_size, block)


@dataclass(frozen=True)
class _Settings:
    """The settings of :func:`generate_stories` (see there)."""

    model: str | None
    decoding: DecodingConfig
    num_stories: int
    seed: int
    batch_size: int
    max_words: int | None
    max_chars: int | None
    system: str | None
    progress: bool
    priming: list[str]
    separator: str | None
    copy_threshold: float
    word_filter: WordListFilter | None
    max_attempts: int
    device: str
    precision: str


def _generate(
    prompts: Sequence[Story], settings: _Settings, block_size: int | None, block: int
) -> list[Story]:
    """Generate one block of prompts with the random stream of its block."""
    from storyeval.models.devices import check_precision, place, resolve_device

    decoding, priming = settings.decoding, settings.priming
    device = resolve_device(settings.device)
    check_precision(settings.precision, device)
    lm = place(load_generator(settings.model), device)
    sep = (settings.separator or default_separator(lm.tokenizer)) if priming else None
    label = decoding.describe() + (f"-{len(priming)}shot" if priming else "")
    system = settings.system or f"{lm.name}-{label}"
    signature = _signature(lm, settings, sep, device, block_size)
    contexts = {record.id: build_context(record.prompt, priming, sep or "") for record in prompts}
    _check_context_length(lm, list(contexts.items()), decoding.max_new_tokens)
    jobs = [
        _Job(record, n, contexts[record.id])
        for record in prompts
        for n in range(settings.num_stories)
    ]
    judge = functools.partial(
        _judge,
        max_words=settings.max_words,
        max_chars=settings.max_chars,
        max_sentences=None,
        priming=priming,
        copy_threshold=settings.copy_threshold,
        word_filter=settings.word_filter,
    )
    _run_attempts(
        lm,
        jobs,
        decoding,
        judge,
        sep=sep,
        seed=settings.seed,
        batch_size=settings.batch_size,
        max_attempts=settings.max_attempts,
        label=f"generate {system}",
        progress=settings.progress,
        precision=settings.precision,
        seed_of_block=block_seed(settings.seed, block),
    )
    _raise_failures(jobs, decoding, settings.max_attempts)
    suffixes = settings.num_stories > 1
    return [_generated_story(job, system, signature, suffixes, bool(priming)) for job in jobs]


def _signature(
    lm: Any, settings: _Settings, sep: str | None, device: str, block_size: int | None
) -> str:
    """The signature of the generated stories: the model's identity and every setting."""
    from storyeval.models.devices import compute_fields

    priming = settings.priming
    return Signature(
        "generate",
        {
            "model": lm.identity,
            **settings.decoding.signature_fields(),
            "num_stories": settings.num_stories,
            "batch_size": settings.batch_size,
            "max_words": settings.max_words,
            "max_chars": settings.max_chars,
            "seed": settings.seed,
            "priming": _priming_identity(priming),
            "priming_n": len(priming),
            "separator": sep,
            "copy_threshold": settings.copy_threshold if priming else None,
            "word_filter": settings.word_filter.identity if settings.word_filter else None,
            "max_attempts": settings.max_attempts,
            "block_size": block_size,
            **compute_fields(device, settings.precision),
        },
    ).render()


def _check_settings(
    prompts: Sequence[Story],
    num_stories: int,
    batch_size: int,
    max_attempts: int,
    copy_threshold: float,
    max_words: int | None,
    max_chars: int | None,
) -> None:
    if not prompts:
        raise ValueError("prompts must not be empty")
    if num_stories < 1 or batch_size < 1 or max_attempts < 1:
        raise ValueError("num_stories, batch_size and max_attempts must be >= 1")
    if not 0 < copy_threshold <= 1:
        raise ValueError(f"copy_threshold must be in (0, 1]; got {copy_threshold}")
    if max_words is not None and max_chars is not None:
        raise ValueError("give at most one of max_words and max_chars")
    empty = [record.id for record in prompts if not record.prompt.strip()]
    if empty:
        raise ValueError(
            f"every prompt must be non-empty to generate a continuation; empty: {', '.join(empty[:5])}"
        )


def _run_attempts(
    lm: Any,
    jobs: list[_Job],
    decoding: DecodingConfig,
    judge: Callable[[str], tuple[str | None, str, float | None]],
    *,
    sep: str | None,
    seed: int,
    batch_size: int,
    max_attempts: int,
    label: str,
    progress: bool,
    precision: str = "float32",
    seed_of_block: int | None = None,
) -> None:
    """Generate for every job until each has a kept text or its attempts run out."""
    from tqdm.auto import tqdm

    bar = tqdm(total=len(jobs), desc=label, disable=not progress, unit="story")
    generator = seeded_generator(seed if seed_of_block is None else seed_of_block)
    for attempt in range(max_attempts):
        pending = [job for job in jobs if job.text is None]
        if not pending or (attempt > 0 and not decoding.do_sample):
            break  # greedy decoding would repeat the dropped texts
        for start in range(0, len(pending), batch_size):
            batch = pending[start : start + batch_size]
            contexts = [job.context for job in batch]
            raws = generate_raw(
                lm, contexts, decoding, separator=sep, generator=generator, precision=precision
            )
            for job, raw in zip(batch, raws, strict=True):
                job.attempts += 1
                text, reason, overlap = judge(raw)
                if text is None:
                    job.dropped[reason] += 1
                    job.last_reason = reason
                    continue
                job.text, job.overlap = text, overlap
                bar.update(1)
    bar.close()


def _raise_failures(jobs: Sequence[_Job], decoding: DecodingConfig, max_attempts: int) -> None:
    failed = [job for job in jobs if job.text is None]
    if not failed:
        return
    shown = ", ".join(f"{job.record.id}#{job.n + 1} ({job.last_reason})" for job in failed[:10])
    if not decoding.do_sample:
        raise GenerationError(
            "greedy decoding produced a dropped text and would produce it again on every "
            f"attempt; use sampling or turn the filter off: {shown}"
        )
    raise GenerationError(
        f"no usable continuation after {max_attempts} attempts for {len(failed)} "
        f"story(ies): {shown}; raise --max-attempts or check the prompts and filters"
    )


def _generated_story(job: _Job, system: str, signature: str, suffix: bool, primed: bool) -> Story:
    assert job.text is not None
    extra: dict[str, Any] = {
        key: value for key, value in job.record.extra.items() if key not in RESERVED_FIELDS
    }
    extra.update(
        prompt_id=job.record.id,
        signature=signature,
        attempts=job.attempts,
        dropped_empty=job.dropped["empty"],
        dropped_unfinished=job.dropped["unfinished"],
        dropped_long=job.dropped["long"],
        dropped_copy=job.dropped["copy"],
        dropped_offensive=job.dropped["offensive"],
    )
    if primed:
        extra["copy_overlap"] = round(job.overlap or 0.0, 4)
    return Story(
        id=f"{job.record.id}-{system}" + (f"-{job.n + 1}" if suffix else ""),
        prompt=job.record.prompt,
        story=job.text,
        reference=job.record.reference,
        system=system,
        extra=extra,
    )


def _cut_words(text: str, max_words: int | None, max_chars: int | None) -> str:
    """Cut an unfinished text at a word boundary within the cap."""
    words = text.split()
    if max_words is not None:
        words = words[:max_words]
    kept: list[str] = []
    for word in words:
        if max_chars is not None and len(" ".join([*kept, word])) > max_chars:
            break
        kept.append(word)
    return " ".join(kept)


def generation_summary(stories: Sequence[Story]) -> dict[str, int]:
    """Totals of the per-story generation counts: stories, generations, and texts dropped as
    empty, unfinished (no complete sentence), too long (a first sentence over the cap),
    copies of a priming text, and for offensive words.

    >>> s = Story("a", "p", "t", extra={"attempts": 3, "dropped_copy": 2, "dropped_empty": 0,
    ...                                "dropped_offensive": 0})
    >>> generation_summary([s])["dropped_copy"], generation_summary([s])["generations"]
    (2, 3)
    """
    summary = {
        "stories": len(stories),
        "generations": 0,
        "dropped_empty": 0,
        "dropped_unfinished": 0,
        "dropped_long": 0,
        "dropped_copy": 0,
        "dropped_offensive": 0,
    }
    for story in stories:
        summary["generations"] += int(story.extra.get("attempts", 1))
        for key in DROP_FIELDS:
            summary[key] += int(story.extra.get(key, 0))
    return summary


@dataclass(frozen=True)
class Continuation:
    """One suggestion for a writer: the text, its signature, and what was dropped first.

    ``complete`` is False when the text is the fallback of ``accept_unfinished``: no attempt
    reached the end of a sentence within ``max_new_tokens``.
    """

    text: str
    signature: str
    attempts: int
    dropped: dict[str, int]
    raw: str
    complete: bool = True


def continue_text(
    context: str,
    *,
    model: str | None = None,
    decoding: DecodingConfig | None = None,
    seed: int = 0,
    max_words: int | None = None,
    max_chars: int | None = None,
    max_sentences: int | None = None,
    word_filter: WordListFilter | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    name: str = "continue",
    accept_unfinished: bool = False,
) -> Continuation:
    """Generate one continuation of ``context`` (the whole story so far), as a collaborative
    writing system suggests the next line.

    The continuation is cut to whole sentences within the caps (an unfinished last sentence
    is dropped) and is generated again when it is empty, has no complete sentence, or contains
    a listed term. With ``accept_unfinished``, if every attempt stopped before the end of a
    sentence, the last such text (cut at a word within the caps, free of listed terms) is
    returned with ``complete=False`` rather than failing: a writer can still edit it.
    Thread-safe: sampling draws from a private random generator seeded with ``seed``, so
    concurrent calls (the study server's generation workers) run in parallel, each
    reproducible.

    Raises
    ------
    GenerationError
        If every attempt was empty or filtered.
    """

    from storyeval.models import load_causal_lm

    if not context.strip():
        raise ValueError("context must not be empty")
    decoding = decoding or DecodingConfig()
    lm = load_causal_lm(model, option="--model")
    signature = Signature(
        name,
        {
            "model": lm.identity,
            **decoding.signature_fields(),
            "max_words": max_words,
            "max_chars": max_chars,
            "max_sentences": max_sentences,
            "seed": seed,
            "word_filter": word_filter.identity if word_filter else None,
        },
    ).render()
    _check_context_length(lm, [("the story so far", context)], decoding.max_new_tokens)
    dropped = {"empty": 0, "unfinished": 0, "long": 0, "copy": 0, "offensive": 0}
    raw = ""
    fallback: tuple[str, str, int] | None = None
    generator = seeded_generator(seed)
    for attempt in range(1, max_attempts + 1):
        raw = generate_raw(lm, [context], decoding, separator=None, generator=generator)[0]
        text, reason, _ = _judge(
            raw,
            max_words=max_words,
            max_chars=max_chars,
            max_sentences=max_sentences,
            priming=(),
            copy_threshold=1.0,
            word_filter=word_filter,
        )
        if text is not None:
            return Continuation(text, signature, attempt, dropped, raw)
        dropped[reason] += 1
        if reason == "unfinished" and accept_unfinished:
            candidate = _cut_words(
                clean_continuation(raw, max_sentences=max_sentences), max_words, max_chars
            )
            if candidate and not (word_filter and word_filter.find(candidate)):
                fallback = (candidate, raw, attempt)
        if not decoding.do_sample:
            break
    if fallback is not None:
        text, raw, attempt = fallback
        return Continuation(text, signature, attempt, dropped, raw, complete=False)
    raise GenerationError(
        f"no usable continuation after {sum(dropped.values())} attempt(s) "
        f"(dropped: {', '.join(f'{k} {v}' for k, v in dropped.items() if v)})"
    )


def generate_source(
    source: str | Path,
    *,
    client: Any,
    block_size: int = 500,
    num_cpus: int = 1,
    progress: bool = False,
    **settings: Any,
) -> list[Story]:
    """Generate from a prompts file on a Dask cluster: :func:`~storyeval.generate.core.generate_on`
    with this cluster's executor (block ``k`` with the seed of its block, as the local engine
    does, so both give the same stories). ``settings`` are the keyword arguments of
    :func:`storyeval.generate.generate_stories` (``model``, ``decoding``, ``seed``, ...)."""
    from storyeval.engine.dask import read_source

    executor = read_source(client, source, kind="prompts", progress=progress, threads=num_cpus)
    return generate_on(executor, block_size=block_size, **{**settings, "progress": False})
