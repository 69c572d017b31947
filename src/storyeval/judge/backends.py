"""Judge backends: a local transformers causal LM, or any OpenAI-compatible chat endpoint.

Both answer :class:`~storyeval.judge.prompts.JudgeRequest` s. Where the backend gives token
probabilities, the answer is the probability of each label as the first answer token (one
forward pass, no sampling: G-Eval's expected score); otherwise, and for rubrics that ask for an
analysis first, the answer is generated and parsed strictly.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from storyeval.errors import StoryevalError
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
    the written text."""

    probabilities: tuple[float, ...] | None = None
    text: str | None = None


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
        Compute the shared prompt prefix of a criterion once and reuse its key-value cache.
    batch_size : int
        Prompts per forward pass when the prefix cache is off.
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
        import torch

        enabled = self.precision == "bfloat16"
        device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=enabled)

    def _state(self, tokens: tuple[int, ...], start: tuple[tuple[int, ...], Any] | None) -> Any:
        """The key-value cache after ``tokens``, extending ``start`` (its tokens, its cache)
        when given; the rubric's is kept for the run, a subject's is not."""
        import torch

        past = copy.deepcopy(start[1]) if start is not None else None
        offset = len(start[0]) if start is not None else 0
        with torch.no_grad(), self._autocast():
            out = self.lm.model(
                torch.tensor([list(tokens[offset:])], device=self.device),
                past_key_values=past,
                use_cache=True,
            )
        self.calls += 1
        return out.past_key_values

    def _rubric_state(self, tokens: tuple[int, ...]) -> Any:
        with self._lock:
            if tokens not in self._prefixes:
                self._prefixes[tokens] = self._state(tokens, None)
            return self._prefixes[tokens]

    def _last_logits_cached(
        self, token_lists: Sequence[list[int]], rubric_length: int
    ) -> list[Any]:
        """Logits after each token list (prompts about one subject): the rubric part is
        computed once per run, the subject once, and only each question after it."""
        import torch

        shared = _common_prefix(token_lists)
        rubric = tuple(token_lists[0][: min(rubric_length, shared)])
        start = (rubric, self._rubric_state(rubric))
        subject = tuple(token_lists[0][:shared])
        state = self._state(subject, start) if len(subject) > len(rubric) else start[1]
        result = []
        for ids in token_lists:
            past = copy.deepcopy(state)
            suffix = torch.tensor([ids[shared:]], device=self.device)
            with torch.no_grad(), self._autocast():
                out = self.lm.model(suffix, past_key_values=past, use_cache=True)
            self.calls += 1
            result.append(out.logits[0, -1].float())
        return result

    def _last_logits_batch(self, texts: Sequence[str]) -> list[Any]:
        import torch

        tokenizer = self.lm.tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        result = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            encoded = tokenizer(
                chunk,
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=False,
            ).to(self.device)
            with torch.no_grad(), self._autocast():
                out = self.lm.model(**encoded)
            self.calls += 1
            result += [row.float() for row in out.logits[:, -1]]
        return result

    def _cached_logits(
        self, requests: Sequence[JudgeRequest], texts: Sequence[str], logits: list[Any | None]
    ) -> None:
        """Fill ``logits`` for the requests that share a rubric and a subject with others."""
        tokens = [self._encode(text) for text in texts]
        rubric_length = _common_prefix(tokens) if len(tokens) > 1 else 0
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request.prefix + "\x00" + request.subject, []).append(index)
        for members in groups.values():
            lists = [tokens[i] for i in members]
            if len(members) < 2 and rubric_length < 1:
                continue
            if _common_prefix(lists) < 1:
                continue
            for index, row in zip(
                members, self._last_logits_cached(lists, rubric_length), strict=True
            ):
                logits[index] = row

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
        logits: list[Any | None] = [None] * len(requests)
        if self.prefix_cache:
            self._cached_logits(requests, texts, logits)
        missing = [i for i, value in enumerate(logits) if value is None]
        rows = self._last_logits_batch([texts[i] for i in missing]) if missing else []
        for index, row in zip(missing, rows, strict=True):
            logits[index] = row
        answers = []
        for request, row in zip(requests, logits, strict=True):
            assert row is not None
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


def _common_prefix(token_lists: Sequence[list[int]]) -> int:
    """The number of leading tokens all lists share (each keeps at least its last token)."""
    first = token_lists[0]
    shared = min(len(ids) for ids in token_lists) - 1
    for ids in token_lists[1:]:
        k = 0
        while k < shared and ids[k] == first[k]:
            k += 1
        shared = k
    return max(shared, 0)


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
    ) -> None:
        try:
            import openai
        except ModuleNotFoundError as exc:
            raise JudgeBackendError(
                "the OpenAI-compatible backend needs the openai package: pip install 'storyeval[judge]'"
            ) from exc
        if concurrency < 1 or retries < 0 or timeout <= 0:
            raise ValueError("concurrency must be >= 1, retries >= 0 and timeout > 0")
        key = os.environ.get(api_key_env) or ("local" if base_url else None)
        if key is None:
            raise JudgeBackendError(f"set {api_key_env} to the API key of the endpoint")
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)
        self._errors = (
            openai.APIConnectionError,
            openai.APITimeoutError,
            openai.RateLimitError,
            openai.InternalServerError,
        )
        self.name = model
        self.identity = f"{model}@{base_url or 'api.openai.com'}"
        self.concurrency, self.retries, self.logprobs = concurrency, retries, logprobs
        self.calls = 0

    def _one(self, request: JudgeRequest, decoding: Decoding, sample: int) -> JudgeAnswer:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "messages": list(request.messages),
            "temperature": decoding.temperature,
            "seed": decoding.seed * 1_000_003 + sample,
            "max_tokens": decoding.max_new_tokens if request.generate else 4,
        }
        if self.logprobs and not request.generate:
            kwargs.update(logprobs=True, top_logprobs=20)
        for attempt in range(self.retries + 1):
            try:
                response = self.client.chat.completions.create(**kwargs)
                self.calls += 1
                break
            except self._errors as exc:
                if attempt == self.retries:
                    raise JudgeBackendError(f"{self.identity}: {exc}") from exc
                time.sleep(min(30.0, 0.5 * 2**attempt))
        choice = response.choices[0]
        text = choice.message.content or ""
        probabilities = (
            _label_probabilities(choice, request.labels) if not request.generate else None
        )
        return JudgeAnswer(probabilities, text)

    def answer(
        self, requests: Sequence[JudgeRequest], decoding: Decoding, *, sample: int = 0
    ) -> list[JudgeAnswer]:
        """Answers to ``requests``, ``concurrency`` at a time, in order."""
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, decoding, sample), requests))


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


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class BackendSpec:
    """The judges of a run as settings rather than loaded models (picklable: an engine's
    workers build the judges from it, each model loaded once per worker process).

    ``models``: local causal LMs (``None``: the offline SmolLM2), or, with ``base_url``, the
    names an OpenAI-compatible server knows.
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

    def build(self) -> list[Any]:
        """The judges (cached per process: a worker builds them once)."""
        found = _BUILT.get(self)
        if found is None:
            if self.base_url is not None:
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
                    )
                    for m in self.models
                ]
            _BUILT[self] = found
        return found


_BUILT: dict[BackendSpec, list[Any]] = {}
