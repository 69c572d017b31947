"""Judge backends: a local transformers causal LM, any OpenAI-compatible chat endpoint, or
another kind from :data:`JUDGE_BACKENDS` (a story reward model trained with ``storyeval train
preference``).

All answer :class:`~storyeval.judge.prompts.JudgeRequest` s. Where the backend gives token
probabilities, the answer is the probability of each label as the first answer token (one
forward pass, no sampling: G-Eval's expected score); otherwise, and for rubrics that ask for an
analysis first, the answer is generated and parsed strictly.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Protocol

from storyeval.base.errors import StoryevalError
from storyeval.base.registry import Registry
from storyeval.judge.prompts import JudgeRequest


class JudgeBackendError(StoryevalError):
    """A judge backend cannot answer (a tokenizer whose labels collide, a server error)."""


@dataclass(frozen=True)
class Decoding:
    """How written answers are generated (probability answers ignore it)."""

    temperature: float = 0.0
    max_new_tokens: int = 160
    seed: int = 0

    def fields(self) -> dict[str, float | int]:
        """The settings, for signatures and cache keys."""
        return {"temperature": self.temperature, "max_new_tokens": self.max_new_tokens}


@dataclass(frozen=True)
class JudgeAnswer:
    """A backend's answer: the probability of each label (None when not available) and/or
    the written text; for a served model also ``error`` (``KIND: reason`` when no answer came
    after the retries: never cached, recorded as failed), ``usage`` (prompt, completion and
    cached prompt tokens) and the model that answered (``served_model``, the response's
    ``system_fingerprint``)."""

    probabilities: tuple[float, ...] | None = None
    text: str | None = None
    error: str | None = field(default=None, repr=False)
    usage: tuple[int, int, int] | None = field(default=None, repr=False)
    served_model: str | None = field(default=None, repr=False)
    fingerprint: str | None = field(default=None, repr=False)


class JudgeBackend(Protocol):
    """What a judge backend provides."""

    identity: str
    name: str

    def answer(
        self, requests: Sequence[JudgeRequest], decoding: Decoding, *, sample: int = 0
    ) -> list[JudgeAnswer]:
        """Answers to ``requests`` in order (``sample`` numbers a repeat, for its seed)."""
        ...


# --------------------------------------------------------------------------- local


def chat_text(tokenizer: Any, messages: Sequence[dict[str, str]]) -> str:
    """The prompt text of a chat with the assistant's turn opened (the model's chat template,
    or a plain fallback for models without one)."""
    if getattr(tokenizer, "chat_template", None):
        text: str = tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True
        )
        return text
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


class TransformersJudge:
    """A local causal LM as a judge (any hub name or local directory; the offline SmolLM2 by
    default, which exercises the machinery but is not a credible judge).

    Parameters
    ----------
    model : str, optional
        Hub name or local directory.
    device : {"cpu", "cuda", "mps", "auto"}
    precision : {"float32", "bfloat16"}
        bfloat16 runs the forward passes under autocast (about 2x on CPUs with bf16 support).
    prefix_cache : bool
        Compute the rubric's preamble once and each story once for all its questions
        (key-value caches); off, every prompt is read whole (still in batches).
    batch_size : int
        Stories per forward pass on a CPU (their questions: up to four times as many rows);
        scaled by the free memory on a GPU.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        precision: str = "float32",
        prefix_cache: bool = True,
        batch_size: int = 8,
    ) -> None:
        from storyeval.models import load_causal_lm
        from storyeval.models.devices import check_precision

        self.lm = load_causal_lm(model, option="--model")
        self.device = _device(device)
        check_precision(precision, self.device)
        self.precision = precision
        self.prefix_cache = prefix_cache
        self.batch_size = batch_size
        self.name = self.lm.name
        self.identity = self.lm.identity
        self.calls = 0
        self._prefixes: dict[tuple[int, ...], Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ tokens

    def _label_ids(self, labels: Sequence[str]) -> list[int]:
        tokenizer = self.lm.tokenizer
        ids = [tokenizer(label, add_special_tokens=False)["input_ids"][0] for label in labels]
        if len(set(ids)) != len(ids):
            raise JudgeBackendError(
                f"the answers {list(labels)} share their first token in {self.name}'s "
                "tokenizer; use labels that differ in their first token"
            )
        return ids

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    # ------------------------------------------------------------------ forward passes

    def _autocast(self) -> Any:
        from storyeval.models.devices import autocast

        return autocast(self.device, self.precision)

    def _rubric_state(self, tokens: tuple[int, ...]) -> Any:
        """The key-value cache after a rubric's preamble, computed once (the last 8 kept)."""
        import torch
        from transformers import DynamicCache

        with self._lock:
            if tokens not in self._prefixes:
                cache = DynamicCache(config=self.lm.model.config)
                if tokens:
                    ids = torch.tensor([list(tokens)], device=self.device)
                    with torch.no_grad(), self._autocast():
                        self.lm.model(input_ids=ids, past_key_values=cache, use_cache=True)
                    self.calls += 1
                if len(self._prefixes) >= 8:
                    self._prefixes.pop(next(iter(self._prefixes)))
                self._prefixes[tokens] = cache
            return self._prefixes[tokens]

    def _batcher(self) -> Any:
        from storyeval.judge.batching import Batcher, cache_budget, token_budget
        from storyeval.models.devices import batch_scale

        tokenizer = self.lm.tokenizer
        pad = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        scale = batch_scale(self.device)
        return Batcher(
            self.lm.model,
            self.device,
            int(pad or 0),
            self._rubric_state,
            self._autocast,
            batch_size=max(1, int(self.batch_size * scale)),
            batch_tokens=token_budget(self.lm.model, self.device, self.precision),
            cache_tokens=cache_budget(self.lm.model, self.device, self.precision),
        )

    def _logits(self, requests: Sequence[JudgeRequest], texts: Sequence[str]) -> list[Any]:
        """The logits after each prompt: the preamble once, each story once for all its
        questions, in batches (see :mod:`storyeval.judge.batching`)."""
        from storyeval.judge.batching import common_prefix, split_prompts

        tokens = [self._encode(text) for text in texts]
        if self.prefix_cache:
            rubric = common_prefix(tokens) if len(tokens) > 1 else 0
            subjects = [r.prefix + "\x00" + r.subject for r in requests]
        else:  # every prompt read whole (for comparisons)
            rubric, subjects = 0, [str(i) for i in range(len(requests))]
        batcher = self._batcher()
        found = batcher.last_logits(split_prompts(tokens, subjects, rubric))
        self.calls += batcher.calls
        return [found[i] for i in range(len(requests))]

    def _check_length(self, texts: Sequence[str], room: int) -> None:
        """Refuse a prompt that, with ``room`` tokens of answer, exceeds the model's context
        (it would be cut or garbled, never judged whole)."""
        limit = self.lm.max_length
        for text in texts:
            length = len(self._encode(text))
            if length + room > limit:
                raise JudgeBackendError(
                    f"a judge prompt is {length} tokens (+{room} for the answer), longer than "
                    f"{self.name}'s context of {limit} tokens; flag long stories with "
                    "--max-words N and cut them with --truncate, or use a model with a longer "
                    "context"
                )

    def _probabilities(self, requests: Sequence[JudgeRequest]) -> list[JudgeAnswer]:
        import torch

        texts = [chat_text(self.lm.tokenizer, r.messages) for r in requests]
        self._check_length(texts, 1)
        answers = []
        for request, row in zip(requests, self._logits(requests, texts), strict=True):
            ids = self._label_ids(request.labels)
            probs = torch.softmax(row, dim=-1)[ids]
            answers.append(JudgeAnswer(tuple(float(p) for p in probs)))
        return answers

    def _written(
        self, requests: Sequence[JudgeRequest], decoding: Decoding, sample: int
    ) -> list[JudgeAnswer]:
        from storyeval.generate.core import DecodingConfig, generate_raw, seeded_generator

        config = DecodingConfig(
            do_sample=decoding.temperature > 0,
            temperature=decoding.temperature if decoding.temperature > 0 else 1.0,
            top_k=None,
            top_p=None,
            max_new_tokens=decoding.max_new_tokens,
        )
        texts = [chat_text(self.lm.tokenizer, r.messages) for r in requests]
        self._check_length(texts, decoding.max_new_tokens)
        generator = seeded_generator(decoding.seed * 1_000_003 + sample)
        answers = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            for text in generate_raw(self.lm, chunk, config, separator=None, generator=generator):
                answers.append(JudgeAnswer(None, text))
            self.calls += 1
        return answers

    def answer(
        self, requests: Sequence[JudgeRequest], decoding: Decoding, *, sample: int = 0
    ) -> list[JudgeAnswer]:
        """Probabilities for requests that do not ask for a written answer, text otherwise."""
        from storyeval.models.devices import place

        place(self.lm, self.device)  # the model is shared: another user may have moved it
        result: list[JudgeAnswer | None] = [None] * len(requests)
        read = [i for i, r in enumerate(requests) if not r.generate]
        write = [i for i, r in enumerate(requests) if r.generate]
        if read:
            for i, answer in zip(
                read, self._probabilities([requests[i] for i in read]), strict=True
            ):
                result[i] = answer
        if write:
            written = self._written([requests[i] for i in write], decoding, sample)
            for i, answer in zip(write, written, strict=True):
                result[i] = answer
        return [answer for answer in result if answer is not None]


def _device(device: str) -> str:
    from storyeval.models.devices import resolve_device

    return resolve_device(device)


# --------------------------------------------------------------------------- endpoint


class OpenAIJudge:
    """Any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

    Parameters
    ----------
    model : str
        The model name the server knows.
    base_url : str, optional
        E.g. ``http://127.0.0.1:8000/v1`` (default: the ``openai`` client's).
    api_key_env : str
        The environment variable holding the API key (a local server accepts any).
    concurrency : int
        Requests in flight at once.
    retries : int
        Retries of a failed request, with exponential back-off.
    timeout : float
        Seconds per request.
    logprobs : bool
        Ask for the top log-probabilities of the first answer token; when the server returns
        them, the answer is read from them; else the text is parsed.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 4,
        retries: int = 3,
        timeout: float = 60.0,
        logprobs: bool = True,
        max_wait: float = 60.0,
        max_tokens_total: int | None = None,
        max_cost: float | None = None,
        price: tuple[float, float] | None = None,
    ) -> None:
        try:
            import openai
        except ModuleNotFoundError as exc:
            raise JudgeBackendError(
                "the OpenAI-compatible backend needs the openai package: pip install 'storyeval[judge]'"
            ) from exc
        if concurrency < 1 or retries < 0 or timeout <= 0 or max_wait < 0:
            raise ValueError("concurrency must be >= 1, retries >= 0, timeout > 0, max_wait >= 0")
        key = os.environ.get(api_key_env) or ("local" if base_url else None)
        if key is None:
            raise JudgeBackendError(f"set {api_key_env} to the API key of the endpoint")
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)
        self._openai = openai
        self.name = model
        self.identity = f"{model}@{base_url or 'api.openai.com'}"
        self.concurrency, self.retries, self.logprobs = concurrency, retries, logprobs
        if max_cost is not None and price is None:
            raise ValueError("a cost budget needs the price per million tokens (--price IN,OUT)")
        self.max_wait, self.max_tokens_total = max_wait, max_tokens_total
        self.max_cost, self.price, self.cost_spent = max_cost, price, 0.0
        self.calls = 0
        self.tokens_spent = 0
        self.refused: list[str] = []  # settings the endpoint refused, dropped once
        self._lock = threading.Lock()

    #: answers are handed to the caller as they arrive (see :meth:`answer`)
    streams_answers = True

    def served_identity(self) -> str:
        """The served model as the endpoint's ``/v1/models`` lists it (its id and owner), or
        ``unlisted`` when the endpoint does not list it (asked once per run)."""
        if getattr(self, "_served", None) is None:
            try:
                listed = {m.id: m for m in self.client.models.list()}
                entry = listed.get(self.name) or (
                    next(iter(listed.values())) if len(listed) == 1 else None
                )
                owner = getattr(entry, "owned_by", None) if entry is not None else None
                self._served = (
                    f"{entry.id}{'/' + owner if owner else ''}" if entry is not None else "unlisted"
                )
            except (self._openai.APIError, ValueError):
                self._served = "unlisted"
        return str(self._served)

    def _kwargs(self, request: JudgeRequest, decoding: Decoding, sample: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "messages": list(request.messages),
            "temperature": decoding.temperature,
            "seed": decoding.seed * 1_000_003 + sample,
            "max_tokens": decoding.max_new_tokens if request.generate else 4,
        }
        if self.logprobs and not request.generate:
            kwargs.update(logprobs=True, top_logprobs=20)
        return kwargs

    def _one(self, request: JudgeRequest, decoding: Decoding, sample: int) -> JudgeAnswer:
        """One question, retried on the failures a retry can cure (rate limits, server errors,
        timeouts, dropped connections, malformed or empty responses), waiting as the server's
        Retry-After asks (at most ``max_wait`` seconds); after the last try, an answer with
        ``error`` set, never an exception, so the other answers of the run are kept."""
        error = "unknown: no attempt"
        for attempt in range(self.retries + 1):
            if self.max_cost is not None and self.cost_spent >= self.max_cost:
                return JudgeAnswer(error=f"budget: {self.cost_spent:.4f} spent (--max-cost)")
            if self.max_tokens_total is not None and self.tokens_spent >= self.max_tokens_total:
                return JudgeAnswer(
                    error=f"budget: {self.tokens_spent} tokens spent (--max-tokens-total)"
                )
            try:
                response = self.client.chat.completions.create(
                    **self._kwargs(request, decoding, sample)
                )
            except (self._openai.APIError, ValueError) as exc:  # classified: retried or reported
                kind, wait = self._classify(exc, attempt)
                error = f"{kind}: {str(exc)[:200]}"
                if kind in ("bad_request", "refused_setting"):
                    if kind == "refused_setting":
                        continue  # the setting is dropped now: ask again at once
                    return JudgeAnswer(error=error)
                if attempt < self.retries:
                    time.sleep(wait)
                continue
            found = self._read_response(response, request)
            if found.error is None or attempt == self.retries:
                return found
            error = found.error
            time.sleep(min(self.max_wait, 0.5 * 2**attempt))
        return JudgeAnswer(error=error)

    def _classify(self, exc: Exception, attempt: int) -> tuple[str, float]:
        """The kind of a failed request and how long to wait before the next try."""
        openai = self._openai
        backoff = min(self.max_wait, 0.5 * 2**attempt)
        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.RateLimitError) or status == 429:
            return "rate_limited", self._retry_after(exc, backoff)
        if isinstance(exc, openai.APITimeoutError):
            return "timeout", backoff
        if isinstance(exc, openai.APIConnectionError):
            return "connection", backoff
        if status is not None and status >= 500:
            return f"server_{status}", self._retry_after(exc, backoff)
        if status == 400 and self._drop_refused(str(exc)):
            return "refused_setting", 0.0
        if status is not None and 400 <= status < 500:
            return "bad_request", 0.0
        return "malformed_response", backoff

    def _retry_after(self, exc: Exception, default: float) -> float:
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        value = headers.get("retry-after")
        try:
            return min(self.max_wait, max(0.0, float(value))) if value is not None else default
        except ValueError:
            return default

    def _drop_refused(self, message: str) -> bool:
        """Whether the refusal names a setting storyeval can do without (log-probabilities),
        which is then dropped for the rest of the run (once, noted in the signature)."""
        lowered = message.lower()
        with self._lock:
            if self.logprobs and "logprobs" in lowered:
                self.logprobs = False
                self.refused.append("logprobs")
                return True
        return False

    def _read_response(self, response: Any, request: JudgeRequest) -> JudgeAnswer:
        """The answer in a response, or an answer with ``error`` (an empty choice list, a
        refusal, a response that is not a chat completion)."""
        choices = getattr(response, "choices", None)
        if not choices:
            return JudgeAnswer(error="empty_choice: the response has no choice")
        message = getattr(choices[0], "message", None)
        refusal = getattr(message, "refusal", None)
        if refusal:
            return JudgeAnswer(error=f"refusal: {str(refusal)[:200]}")
        text = getattr(message, "content", None)
        if text is None:
            return JudgeAnswer(error="empty_choice: the answer has no content")
        usage = getattr(response, "usage", None)
        counts = None
        if usage is not None:
            details = getattr(usage, "prompt_tokens_details", None)
            cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
            counts = (int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), cached)
        with self._lock:
            self.calls += 1
            self.tokens_spent += sum(counts[:2]) if counts else 0
            if counts and self.price is not None:
                self.cost_spent += (counts[0] * self.price[0] + counts[1] * self.price[1]) / 1e6
        probabilities = (
            _label_probabilities(choices[0], request.labels) if not request.generate else None
        )
        return JudgeAnswer(
            probabilities, text, usage=counts, served_model=getattr(response, "model", None),
            fingerprint=getattr(response, "system_fingerprint", None),
        )  # fmt: skip

    def answer(
        self,
        requests: Sequence[JudgeRequest],
        decoding: Decoding,
        *,
        sample: int = 0,
        on_answer: Callable[[int, JudgeAnswer], None] | None = None,
    ) -> list[JudgeAnswer]:
        """Answers to ``requests``, ``concurrency`` at a time, in order; ``on_answer(i,
        answer)`` is called as each arrives (the cache stores it at once, so a run stopped
        midway asks no finished question again)."""
        found: list[JudgeAnswer | None] = [None] * len(requests)
        # a story's questions one after another: they share the prompt up to the question,
        # which a server's prompt cache reuses (2.1x as many answers a second from llama.cpp
        # at concurrency 1); the answers come back in the order asked
        order = sorted(
            range(len(requests)), key=lambda i: (requests[i].prefix, requests[i].subject)
        )
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._one, requests[i], decoding, sample): i for i in order}
            for future in as_completed(futures):
                index = futures[future]
                found[index] = future.result()
                if on_answer is not None:
                    on_answer(index, found[index])  # type: ignore[arg-type]
        return [a for a in found if a is not None]


def _label_probabilities(choice: Any, labels: Sequence[str]) -> tuple[float, ...] | None:
    """Probabilities of the labels as the first answer token, from the top log-probabilities
    (None when the server returned none; labels not among them get 0)."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    top: dict[str, float] = {}
    for item in content[0].top_logprobs:  # "5" and " 5" are one answer
        key = item.token.strip().lower()
        top[key] = top.get(key, 0.0) + math.exp(item.logprob)
    if not top:
        return None
    return tuple(top.get(label.lower(), 0.0) for label in labels)


# --------------------------------------------------------------------------- other kinds

#: Judge backends besides causal LMs, by ``--backend`` name: a factory taking the model
#: (``--model``) and ``device``/``precision`` keywords, returning a :class:`JudgeBackend`.
#: ``reward-model`` (a trained preference model) is built in; packages add their own under
#: the ``storyeval.judge_backends`` entry-point group.
JUDGE_BACKENDS: Registry[Callable[..., JudgeBackend]] = Registry(
    "judge backend",
    builtins=("storyeval.learn.preference.judge",),
    entry_point_group="storyeval.judge_backends",
)


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class BackendSpec:
    """The judges of a run as settings rather than loaded models (picklable: an engine's
    workers build the judges from it, each model loaded once per worker process).

    ``models``: local causal LMs (``None``: the offline SmolLM2), or, with ``base_url``, the
    names an OpenAI-compatible server knows; with another ``kind`` (a :data:`JUDGE_BACKENDS`
    name, e.g. ``"reward-model"``), what that backend reads (a trained model's directory).
    """

    models: tuple[str | None, ...] = (None,)
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    device: str = "cpu"
    precision: str = "float32"
    prefix_cache: bool = True
    concurrency: int = 4
    timeout: float = 60.0
    retries: int = 3
    batch_size: int = 8
    kind: str = "llm"
    max_tokens_total: int | None = None
    max_cost: float | None = None
    price: tuple[float, float] | None = None

    def build(self) -> list[Any]:
        """The judges (cached per process: a worker builds them once)."""
        found = _BUILT.get(self)
        if found is None:
            if self.kind != "llm":
                factory = JUDGE_BACKENDS.get(self.kind)
                if not all(self.models):
                    raise ValueError(f"--backend {self.kind} needs --model")
                found = [
                    factory(str(m), device=self.device, precision=self.precision)
                    for m in self.models
                ]
            elif self.base_url is not None:
                if not all(self.models):
                    raise ValueError("a judge behind --base-url needs --model (the server's name)")
                found = [
                    OpenAIJudge(
                        str(m),
                        base_url=self.base_url,
                        api_key_env=self.api_key_env,
                        concurrency=self.concurrency,
                        timeout=self.timeout,
                        retries=self.retries,
                        max_tokens_total=self.max_tokens_total,
                        max_cost=self.max_cost,
                        price=self.price,
                    )
                    for m in self.models
                ]
            else:
                found = [
                    TransformersJudge(
                        m,
                        device=self.device,
                        precision=self.precision,
                        prefix_cache=self.prefix_cache,
                        batch_size=self.batch_size,
                    )
                    for m in self.models
                ]
            _BUILT[self] = found
        return found


_BUILT: dict[BackendSpec, list[Any]] = {}
