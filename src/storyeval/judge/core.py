"""Judging stories: absolute scores per criterion, or pairwise preferences in both orders;
several judges and repeats in one run; every parse failure counted, never imputed.

The output is long-format :class:`~storyeval.corpus.Judgment` records (``rater_id`` is the
judge's signature), so ``correlate``, ``agreement``, ``report`` and ``judge-eval`` treat a
judge like a person; pairwise runs give comparison records for ``storyeval rank``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from storyeval import __version__
from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Judgment, Story
from storyeval.engine.blocks import Executor, LocalExecutor
from storyeval.judge.backends import BackendSpec, Decoding, JudgeAnswer, JudgeBackend
from storyeval.judge.cache import JudgeCache, cache_key
from storyeval.judge.parse import parse_answer
from storyeval.judge.prompts import (
    SYSTEM,
    JudgeRequest,
    absolute_request,
    pairwise_request,
    spans_request,
)
from storyeval.judge.rubric import Criterion, Rubric
from storyeval.meta.spans import span_rows, story_units

Mode = Literal["absolute", "pairwise"]
#: The version of the prompt layout (part of every judge signature).
TEMPLATE = "v1-" + hashlib.sha256(SYSTEM.encode()).hexdigest()[:8]
LOW_MASS = 0.5


@dataclass
class JudgeRun:
    """The result of :func:`judge_stories`.

    Attributes
    ----------
    judgments : list of Judgment
        Absolute mode: one per judge, story, criterion and repeat that parsed.
    comparisons : list of dict
        Pairwise mode: one per judge, pair, order, criterion and repeat, in the format of
        ``storyeval rank`` (``item_id, prompt_id, system_a, system_b, winner, rater_id,
        criterion``) with ``order``, ``first`` (the system shown as A), ``p_first`` and the
        parse status.
    failures : list of dict
        Answers that did not parse (judge, item, criterion, sample, the raw answer).
    signatures : dict of str to Signature
        Per judge.
    notes : list of str
        Long texts, judges of the generators' family, low probability mass on the answers,
        judges trained on some of the stories.
    calls, cached : int
        Model calls made, answers taken from the cache.
    in_training : dict of str to (int, int, str)
        Per judge that knows its training stories (a reward model): how many of the judged
        stories it was trained on, of how many, and where its held-out predictions are;
        summed over blocks, and turned into a note when the run is finished.
    """

    judgments: list[Judgment] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    signatures: dict[str, Signature] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    calls: int = 0
    cached: int = 0
    in_training: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    served: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)

    def account(self, judge: str, answer: JudgeAnswer) -> None:
        """Count a fresh answer and its tokens (prompt, completion, cached prompt) and note
        which model gave it: ``served[judge]`` lists each identity with the number of the
        answer it first gave (more than one: the endpoint changed model mid-run)."""
        number = self.answered[judge] = self.answered.get(judge, 0) + 1
        if answer.usage is not None:
            totals = self.tokens.setdefault(judge, [0, 0, 0])
            for k, count in enumerate(answer.usage):
                totals[k] += count
        if answer.served_model is not None:
            identity = answer.served_model
            if answer.fingerprint:
                identity += f" ({answer.fingerprint})"
            seen = self.served.setdefault(judge, [])
            if not seen or seen[-1][1] != identity:
                seen.append((number, identity))

    def failed(
        self, judge: str, item_id: str, criterion: str, sample: int, status: str, raw: str | None
    ) -> None:
        """Record an answer that gave no score (counted, written out, never imputed)."""
        self.failures.append(
            {
                "judge": judge,
                "item_id": item_id,
                "criterion": criterion,
                "sample": sample,
                "status": status,
                "raw": raw,
            }
        )

    def summary(self) -> Any:
        """Per judge and criterion: answers, parse failures, requests that got no answer
        after the retries, the mean score (absolute) or the share of first-position wins and
        the consistency across orders (pairwise)."""
        import pandas as pd

        rows = []
        for judge, signature in self.signatures.items():
            rater = signature.render()
            failed = [f for f in self.failures if f["judge"] == judge]
            mine = self._records(rater)
            criteria = dict.fromkeys(
                [r["criterion"] for r in mine] + [f["criterion"] for f in failed]
            )
            for criterion in criteria:
                records = [r for r in mine if r["criterion"] == criterion]
                statuses = [f["status"] for f in failed if f["criterion"] == criterion]
                row = {
                    "judge": judge,
                    "criterion": criterion,
                    "answers": len(records) + len(statuses),
                }
                row["parse_failures"] = sum(not s.startswith("failed:") for s in statuses)
                row["request_failures"] = sum(s.startswith("failed:") for s in statuses)
                row.update(
                    _absolute_stats(records)
                    if records and "value" in records[0]
                    else _pair_stats(records)
                )
                rows.append(row)
        return pd.DataFrame(rows)

    def ensemble(self) -> tuple[Any, Any]:
        """With several judges (absolute mode): the judges' mean per item and criterion
        (``rater_id`` ``ensemble-mean``) and their agreement (Krippendorff's alpha, ICC) per
        criterion. Empty tables with one judge."""
        import warnings

        import pandas as pd

        from storyeval.base.errors import StoryevalWarning
        from storyeval.meta import agreement

        if len(self.signatures) < 2 or not self.judgments:
            return pd.DataFrame(), pd.DataFrame()
        frame = pd.DataFrame(
            [(j.item_id, j.rater_id, j.criterion, j.value) for j in self.judgments],
            columns=["item_id", "rater_id", "criterion", "value"],
        )
        per_judge = frame.groupby(["item_id", "rater_id", "criterion"], as_index=False)[
            "value"
        ].mean()
        mean = per_judge.groupby(["item_id", "criterion"], as_index=False)["value"].mean()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StoryevalWarning)
            table = agreement(per_judge, n_boot=200)
        chosen = table[table["method"].isin(["krippendorff_alpha_interval", "icc2", "icc2k"])]
        return mean.assign(rater_id="ensemble-mean"), chosen.reset_index(drop=True)

    def _records(self, rater: str) -> list[dict[str, Any]]:
        if self.comparisons:
            return [c for c in self.comparisons if c["rater_id"] == rater]
        return [j.to_dict() for j in self.judgments if j.rater_id == rater]


def _absolute_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    values = [r["value"] for r in records]
    masses = [r["label_mass"] for r in records if r.get("label_mass") is not None]
    return {
        "mean": sum(values) / len(values),
        "min": min(values),
        "max": max(values),
        "mean_label_mass": sum(masses) / len(masses) if masses else math.nan,
    }


def _pair_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    decided = [r for r in records if r["winner"] != "tie"]
    first = sum(1 for r in decided if r["winner"] == r["first"])
    by_pair: dict[tuple[str, str, int], set[str]] = {}
    for r in records:
        by_pair.setdefault((r["item_id"], r["criterion"], r["sample"]), set()).add(r["winner"])
    both = [winners for winners in by_pair.values()]
    consistent = sum(1 for winners in both if len(winners) == 1)
    return {
        "first_position_wins": first / len(decided) if decided else math.nan,
        "ties": len(records) - len(decided),
        "position_consistency": consistent / len(both) if both else math.nan,
    }


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class JudgeSettings:
    """Everything besides the stories, the rubric and the judge that changes the numbers."""

    mode: Mode = "absolute"
    score: Literal["expected", "argmax"] = "expected"
    repeats: int = 1
    seed: int = 0
    decoding: Decoding = field(default_factory=Decoding)
    max_words: int | None = None
    truncate: bool = False
    both_orders: bool = True
    margin: float = 0.0

    def check(self) -> None:
        """Refuse settings that cannot work together."""
        if self.mode not in ("absolute", "pairwise"):
            raise ValueError(f"mode must be absolute or pairwise; got {self.mode!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1; got {self.repeats}")
        if not 0 <= self.margin < 0.5:
            raise ValueError(f"margin must be in [0, 0.5); got {self.margin}")
        if self.truncate and self.max_words is None:
            raise ValueError("truncate needs max_words")

    def signature(self, backend: JudgeBackend, rubric: Rubric, scoring: str) -> Signature:
        """The judge's signature: model, rubric, template and every setting."""
        fields: dict[str, Any] = {
            "model": backend.identity,
            "rubric": rubric.identity,
            "mode": self.mode,
            "template": TEMPLATE,
            "scoring": scoring,
        }
        served = getattr(backend, "served_identity", None)
        if served is not None:  # a served model: what the server says it serves
            fields["served"] = served()
        device = getattr(backend, "device", None)
        if device is not None:  # a local model: where and how it ran
            from storyeval.models.devices import compute_fields

            fields.update(compute_fields(device, getattr(backend, "precision", "float32")))
        if scoring == "first-token" and self.mode == "absolute" and rubric.kind != "spans":
            fields["score"] = self.score
        if scoring == "generated":
            fields.update(self.decoding.fields())
        if rubric.kind == "spans":
            fields["unit"] = "sentence"
        if self.mode == "pairwise":
            fields["orders"] = "both" if self.both_orders else "seeded-random"
            fields["margin"] = self.margin
        fields.update(repeats=self.repeats, seed=self.seed)
        fields["max_words"] = self.max_words
        fields["truncate"] = self.truncate
        return Signature("judge", fields, __version__)


# --------------------------------------------------------------------------- texts


def _length_checked(
    stories: Sequence[Story], settings: JudgeSettings, notes: list[str]
) -> list[Story]:
    if settings.max_words is None:
        return list(stories)
    long = [s for s in stories if len(s.story.split()) > settings.max_words]
    if not long:
        return list(stories)
    action = "truncated to" if settings.truncate else "longer than"
    notes.append(
        f"{len(long)} stor(ies) {action} {settings.max_words} words: {', '.join(s.id for s in long[:5])}"
    )
    if not settings.truncate:
        return list(stories)
    return [
        Story(
            s.id,
            s.prompt,
            " ".join(s.story.split()[: settings.max_words]),
            s.reference,
            s.system,
            s.extra,
        )
        if s in long
        else s
        for s in stories
    ]


def model_family(name: str) -> str:
    """A judge's model family: the first word of its model name (``smollm2`` for
    ``HuggingFaceTB/SmolLM2-1.7B``)."""
    return name.lower().split("/")[-1].split("-")[0]


def family_systems(stories: Sequence[Story], judge_name: str) -> list[str]:
    """The systems of ``stories`` whose name contains the judge's model family."""
    family = model_family(judge_name)
    if not family:
        return []
    return sorted({str(s.system) for s in stories if s.system and family in s.system.lower()})


def _family_note(stories: Sequence[Story], backend: JudgeBackend) -> str | None:
    family, systems = model_family(backend.name), family_systems(stories, backend.name)
    if not systems:
        return None
    return (
        f"judge {backend.name} shares a model family ({family}) with the system(s) "
        f"{', '.join(sorted(systems))}: judges tend to prefer their own family's text"
    )


def _training_overlap(
    stories: Sequence[Story], backend: JudgeBackend
) -> tuple[int, int, str] | None:
    """How many of ``stories`` the judge was trained on, of how many, and where its held-out
    predictions are; None for a judge that does not know (read by duck typing: the backend's
    ``training_overlap``, a reward model's)."""
    overlap = getattr(backend, "training_overlap", None)
    count = overlap(stories) if overlap is not None else None
    if count is None:
        return None
    return count, len(stories), getattr(backend, "heldout_file", "its model directory")


def training_notes(run: JudgeRun) -> list[str]:
    """A note per judge trained on some of the run's stories: its agreement with people on
    them is in-sample."""
    return [
        f"judge {name} was trained on {count} of these {total} stories: its agreement with "
        "people on them is in-sample and overstates how it judges new stories; compare it "
        f"with people on other stories, or use its cross-validated predictions ({where})"
        for name, (count, total, where) in run.in_training.items()
        if count
    ]


# --------------------------------------------------------------------------- answering


class _Asker:
    """Answers requests through the cache, then the backend (in batches)."""

    def __init__(
        self,
        backend: JudgeBackend,
        settings: JudgeSettings,
        cache: JudgeCache | None,
        run: JudgeRun,
    ) -> None:
        self.backend, self.settings, self.cache, self.run = backend, settings, cache, run

    def __call__(self, requests: Sequence[JudgeRequest], sample: int) -> list[JudgeAnswer]:
        decoding = Decoding(
            self.settings.decoding.temperature,
            self.settings.decoding.max_new_tokens,
            self.settings.seed,
        )
        keys = [self._key(r, decoding, sample) for r in requests]
        answers: list[JudgeAnswer | None] = [
            self.cache.get(k) if self.cache else None for k in keys
        ]
        self.run.cached += sum(a is not None for a in answers)
        todo = [i for i, a in enumerate(answers) if a is None]
        if todo:
            before = getattr(self.backend, "calls", 0)

            def keep(position: int, answer: JudgeAnswer) -> None:
                if self.cache is not None and answer.error is None:
                    self.cache.put(keys[todo[position]], answer)

            asked = [requests[i] for i in todo]
            if getattr(self.backend, "streams_answers", False):  # cached as each arrives
                fresh = self.backend.answer(asked, decoding, sample=sample, on_answer=keep)  # type: ignore[call-arg]
            else:
                fresh = self.backend.answer(asked, decoding, sample=sample)
                for position, answer in enumerate(fresh):
                    keep(position, answer)
            self.run.calls += getattr(self.backend, "calls", 0) - before
            for i, answer in zip(todo, fresh, strict=True):
                answers[i] = answer
                self.run.account(self.backend.name, answer)
        return [a for a in answers if a is not None]

    def _key(self, request: JudgeRequest, decoding: Decoding, sample: int) -> str:
        settings: dict[str, Any] = {
            "sample": sample if request.generate and decoding.temperature > 0 else 0
        }
        if request.generate:
            settings.update(decoding.fields(), seed=decoding.seed)
        return cache_key(self.backend.identity, request, settings)


@dataclass(frozen=True)
class _Reading:
    """What an answer says: the chosen label's index (None: no answer), the label
    probabilities renormalised, the probability mass the judge put on the labels, a status."""

    index: int | None
    probabilities: list[float] | None
    mass: float | None
    status: str


def _read(answer: JudgeAnswer, request: JudgeRequest) -> _Reading:
    if answer.error is not None:  # no answer came: "failed:KIND"
        return _Reading(None, None, None, "failed:" + answer.error.split(":", 1)[0])
    if answer.probabilities is not None and not request.generate:
        total = sum(answer.probabilities)
        if total <= 0:
            return _Reading(None, None, 0.0, "no_probability")
        probs = [p / total for p in answer.probabilities]
        best = max(range(len(probs)), key=probs.__getitem__)
        return _Reading(best, probs, total, "probabilities")
    label = parse_answer(answer.text or "", request.labels, analysed=request.analysed)
    if label is None:
        return _Reading(None, None, None, "parse_error")
    return _Reading(list(request.labels).index(label), None, None, "parsed")


# --------------------------------------------------------------------------- absolute


def _absolute(
    stories: Sequence[Story], rubric: Rubric, ask: _Asker, rater: str, judge: str, run: JudgeRun
) -> None:
    from storyeval.corpus import prompt_id

    settings = ask.settings
    jobs = [(criterion, story) for criterion in rubric.criteria for story in stories]
    requests = [absolute_request(story, rubric, criterion) for criterion, story in jobs]
    for sample in range(settings.repeats):  # one call: the backend shares prompt parts
        for (criterion, story), request, answer in zip(
            jobs, requests, ask(requests, sample), strict=True
        ):
            reading = _read(answer, request)
            if reading.index is None:
                run.failed(
                    judge,
                    story.id,
                    criterion.name,
                    sample,
                    reading.status,
                    answer.error or answer.text,
                )
                continue
            value, extra = _absolute_value(
                criterion, reading.index, reading.probabilities, settings.score
            )
            extra.update(
                system=story.system,
                prompt_id=prompt_id(story),
                sample=sample,
                parse_status=reading.status,
                label_mass=None if reading.mass is None else round(reading.mass, 6),
                raw=answer.text,
            )
            extra.update(_served_fields(answer))
            run.judgments.append(Judgment(story.id, rater, criterion.name, value, extra=extra))


def _served_fields(answer: JudgeAnswer) -> dict[str, Any]:
    """What a served model's answer records: the model that answered and its tokens."""
    found: dict[str, Any] = {}
    if answer.served_model is not None:
        found["served_model"] = answer.served_model
    if answer.fingerprint is not None:
        found["system_fingerprint"] = answer.fingerprint
    if answer.usage is not None:
        found.update(
            zip(("prompt_tokens", "completion_tokens", "cached_tokens"), answer.usage, strict=True)
        )
    return found


def _absolute_value(
    criterion: Criterion, index: int, probs: list[float] | None, score: str
) -> tuple[float, dict[str, Any]]:
    values = criterion.values
    argmax = float(values[index])
    if probs is None:
        return argmax, {"argmax": argmax}
    expected = sum(p * v for p, v in zip(probs, values, strict=True))
    extra: dict[str, Any] = {
        "argmax": argmax,
        "expected": round(expected, 6),
        "probabilities": [round(p, 6) for p in probs],
    }
    return (round(expected, 6) if score == "expected" else argmax), extra


# --------------------------------------------------------------------------- pairwise


def _pairs(stories: Sequence[Story]) -> list[tuple[str, Story, Story]]:
    """Every two stories of different systems for one prompt: ``(prompt id, x, y)``."""
    from storyeval.corpus import prompt_id

    by_prompt: dict[str, list[Story]] = {}
    for story in stories:
        key = prompt_id(story)
        if key is None or story.system is None:
            raise StoryevalError(
                f"pairwise judging needs a system and a prompt (or prompt_id) on every story; "
                f"story {story.id!r} lacks one"
            )
        by_prompt.setdefault(key, []).append(story)
    pairs = []
    for key, group in by_prompt.items():
        for x, y in itertools.combinations(group, 2):
            if x.system != y.system:
                pairs.append((key, x, y))
    if not pairs:
        raise StoryevalError("no prompt has stories of two systems to compare")
    return pairs


def _pairwise(
    stories: Sequence[Story], rubric: Rubric, ask: _Asker, rater: str, judge: str, run: JudgeRun
) -> None:
    settings = ask.settings
    pairs = _pairs(stories)
    orders: list[tuple[str, Story, Story, str]] = []
    for key, x, y in pairs:
        if settings.both_orders:
            orders += [(key, x, y, "xy"), (key, y, x, "yx")]
            continue
        # one seeded draw per pair: the order of a pair does not depend on the other pairs
        # of the run (nor on how an engine split the stories into blocks)
        rng = random.Random(f"{settings.seed}|{key}|{x.id}|{y.id}")
        orders.append((key, x, y, "xy") if rng.random() < 0.5 else (key, y, x, "yx"))
    jobs = [(criterion, order) for criterion in rubric.criteria for order in orders]
    requests = [pairwise_request(a, b, rubric, criterion) for criterion, (_, a, b, _) in jobs]
    for sample in range(settings.repeats):  # one call: the backend shares prompt parts
        for (criterion, (key, a, b, order)), request, answer in zip(
            jobs, requests, ask(requests, sample), strict=True
        ):
            x, y = (a, b) if order == "xy" else (b, a)
            item = f"{key}:{x.id}~{y.id}"
            reading = _read(answer, request)
            if reading.index is None:
                run.failed(
                    judge, item, criterion.name, sample, reading.status, answer.error or answer.text
                )
                continue
            probs, status = reading.probabilities, reading.status
            p_first = probs[0] if probs is not None else (1.0 if reading.index == 0 else 0.0)
            winner = _winner(p_first, a, b, settings.margin)
            run.comparisons.append(
                {
                    "item_id": item,
                    "prompt_id": key,
                    "system_a": x.system,
                    "system_b": y.system,
                    "winner": winner,
                    "rater_id": rater,
                    "criterion": criterion.name,
                    "order": order,
                    "first": a.system,
                    "p_first": round(p_first, 6),
                    "sample": sample,
                    "parse_status": status,
                    "raw": answer.text,
                }
                | _served_fields(answer)
            )


def _winner(p_first: float, first: Story, second: Story, margin: float) -> str:
    if p_first > 0.5 + margin:
        return str(first.system)
    if p_first < 0.5 - margin:
        return str(second.system)
    return "tie"


# --------------------------------------------------------------------------- the run


def judge_stories(
    stories: Sequence[Story],
    rubric: Rubric,
    backends: Sequence[JudgeBackend],
    *,
    settings: JudgeSettings | None = None,
    cache: JudgeCache | None = None,
    progress: Callable[[str], None] | None = None,
    finish: bool = True,
) -> JudgeRun:
    """Judge stories with one or more judges.

    Parameters
    ----------
    stories : sequence of Story
        Pairwise mode needs ``system`` and a prompt (or ``prompt_id``) on every story.
    rubric : Rubric
        From :func:`storyeval.judge.load_rubric`.
    backends : sequence of JudgeBackend
        :class:`~storyeval.judge.backends.TransformersJudge` or
        :class:`~storyeval.judge.backends.OpenAIJudge` instances (several: an ensemble).
    settings : JudgeSettings, optional
        Mode, score, repeats, seed, decoding, length control.
    cache : JudgeCache, optional
        Answers already given are taken from it; new ones are added.
    progress : callable, optional
        Called with a line of text as each judge starts.
    finish : bool
        Add the run-level notes (False for a block of a larger run).

    Returns
    -------
    JudgeRun

    Raises
    ------
    ValueError
        Bad settings (repeats of deterministic probability answers, a margin outside [0, 0.5)).
    StoryevalError
        No story, or (pairwise) no prompt with two systems.
    """
    settings = settings or JudgeSettings()
    settings.check()
    if not stories:
        raise StoryevalError("there are no stories to judge")
    if not backends:
        raise ValueError("give at least one judge")
    sampled = rubric.analyse_first and settings.decoding.temperature > 0
    if settings.repeats > 1 and not sampled:
        raise ValueError(
            "repeats need sampled written answers (a rubric with analyse_first and a temperature "
            "> 0); probability answers are deterministic"
        )
    if rubric.kind == "spans" and settings.mode != "absolute":
        raise ValueError("a spans rubric marks the sentences of each story: use mode absolute")
    if len(backends) > 1 and all(getattr(b, "streams_answers", False) for b in backends):
        return _jury_at_once(stories, rubric, backends, settings, cache, progress, finish)
    run = JudgeRun()
    texts = _length_checked(stories, settings, run.notes)
    for backend in backends:
        scoring = "generated" if rubric.analyse_first else "first-token"
        signature = settings.signature(backend, rubric, scoring)
        run.signatures[backend.name] = signature
        note = _family_note(texts, backend)
        if note:
            run.notes.append(note)
        overlap = _training_overlap(stories, backend)
        if overlap is not None:
            run.in_training[backend.name] = overlap
        if progress is not None:
            progress(f"judging with {backend.name} ({settings.mode}, rubric {rubric.name})")
        ask = _Asker(backend, settings, cache, run)
        judge = _absolute if settings.mode == "absolute" else _pairwise
        if rubric.kind == "spans":
            judge = _spans
        judge(texts, rubric, ask, signature.render(), backend.name, run)
        for setting in getattr(backend, "refused", []):
            run.notes.append(
                f"{backend.name}: the endpoint refused {setting}: dropped for the run (answers "
                "read from the text)"
            )
    if finish:
        run.notes += training_notes(run)
        _mass_note(run)
        run.notes += served_notes(run)
    return run


def _jury_at_once(
    stories: Sequence[Story], rubric: Rubric, backends: Sequence[JudgeBackend],
    settings: JudgeSettings, cache: JudgeCache | None,
    progress: Callable[[str], None] | None, finish: bool,
) -> JudgeRun:  # fmt: skip
    """Several served judges at once, each with its own concurrency and budget (a thread
    per judge: the time is the slowest judge's, not their sum); the records in judge order,
    as one after another would give them."""
    from concurrent.futures import ThreadPoolExecutor

    def one(backend: JudgeBackend) -> JudgeRun:
        return judge_stories(
            stories,
            rubric,
            [backend],
            settings=settings,
            cache=cache,
            progress=progress,
            finish=False,
        )

    with ThreadPoolExecutor(max_workers=len(backends)) as pool:
        parts = list(pool.map(one, backends))
    return merge_judge_runs(parts, finish=finish)


def served_notes(run: JudgeRun) -> list[str]:
    """A warning per judge whose endpoint answered with more than one model during the run,
    saying from which answer on."""
    notes = []
    for judge, seen in run.served.items():
        for (_, before), (number, after) in itertools.pairwise(seen):
            notes.append(
                f"WARNING: {judge}: the endpoint's model changed from answer {number} on: "
                f"{before} -> {after}; answers before and after are not comparable"
            )
    return notes


# --------------------------------------------------------------------------- spans


def _spans(
    stories: Sequence[Story], rubric: Rubric, ask: _Asker, rater: str, judge: str, run: JudgeRun
) -> None:
    """Mark every sentence of every story with a label of a spans rubric, or none: one question
    per sentence (the taxonomy and the numbered story shared), the records of the ``spans``
    study protocol per story. A story with a sentence whose answer did not parse is left out
    (its failures are counted): an unmarked sentence is never imputed."""
    from storyeval.corpus import prompt_id

    names = [c.name for c in rubric.criteria]
    jobs = []
    for story in stories:
        units = story_units(story.story)
        jobs += [(story, units, i) for i in range(1, len(units) + 1)]
    requests = [
        spans_request(story, rubric, [u.text for u in units], index) for story, units, index in jobs
    ]
    for sample in range(ask.settings.repeats):
        marked: dict[str, dict[int, str]] = {}
        mass: dict[str, list[float]] = {}
        broken: set[str] = set()
        for (story, _units, index), request, answer in zip(
            jobs, requests, ask(requests, sample), strict=True
        ):
            reading = _read(answer, request)
            if reading.index is None:
                run.failed(
                    judge, story.id, f"sentence {index}", sample, reading.status, answer.text
                )
                broken.add(story.id)
                continue
            if reading.index > 0:
                marked.setdefault(story.id, {})[index] = names[reading.index - 1]
            if reading.mass is not None:
                mass.setdefault(story.id, []).append(reading.mass)
        for story in stories:
            if story.id in broken:
                continue
            units = story_units(story.story)
            masses = mass.get(story.id)
            for criterion, value, extra in span_rows(units, marked.get(story.id, {}), names):
                extra.update(
                    system=story.system,
                    prompt_id=prompt_id(story),
                    sample=sample,
                    label_mass=round(min(masses), 6) if masses else None,
                )
                run.judgments.append(Judgment(story.id, rater, criterion, value, extra=extra))


def judge_blocks_plan(stories: Sequence[Story], mode: str, block_size: int) -> list[list[int]]:
    """The stories of each block, as indices: consecutive runs of ``block_size`` stories
    (absolute mode), or whole prompts packed in order up to ``block_size`` stories
    (pairwise: the stories of a prompt are compared with each other).

    >>> from storyeval.corpus import Story
    >>> s = [Story(str(i), f"P{i // 2}", "x", system=f"s{i % 2}") for i in range(6)]
    >>> judge_blocks_plan(s, "absolute", 4), judge_blocks_plan(s, "pairwise", 3)
    ([[0, 1, 2, 3], [4, 5]], [[0, 1], [2, 3], [4, 5]])
    """
    from storyeval.corpus import prompt_id

    if block_size < 1:
        raise ValueError(f"block_size must be >= 1; got {block_size}")
    if mode == "absolute":
        return [
            list(range(a, min(a + block_size, len(stories))))
            for a in range(0, len(stories), block_size)
        ]
    groups: dict[str, list[int]] = {}
    for index, story in enumerate(stories):
        groups.setdefault(str(prompt_id(story)), []).append(index)
    blocks: list[list[int]] = []
    for members in groups.values():
        if blocks and len(blocks[-1]) + len(members) <= block_size:
            blocks[-1] += members
        else:
            blocks.append(list(members))
    return blocks


def _merge_accounts(merged: JudgeRun, part: JudgeRun) -> None:
    """Add a block's tokens, answers and served models to the merged run's (answer numbers
    continue from the earlier blocks')."""
    for name, counts in part.tokens.items():
        before = merged.tokens.get(name, [0, 0, 0])
        merged.tokens[name] = [a + b for a, b in zip(before, counts, strict=True)]
    for name, identities in part.served.items():
        offset = merged.answered.get(name, 0)
        known = merged.served.setdefault(name, [])
        for number, identity in identities:
            if not known or known[-1][1] != identity:
                known.append((offset + number, identity))
    for name, count in part.answered.items():
        merged.answered[name] = merged.answered.get(name, 0) + count


def merge_judge_runs(runs: Sequence[JudgeRun], *, finish: bool = True) -> JudgeRun:
    """The runs of consecutive blocks (or of the judges of a jury) as one run (records in
    order, notes once; with ``finish``, the probability-mass, training and served-model notes
    over all answers)."""
    merged = JudgeRun()
    for part in runs:
        merged.judgments += part.judgments
        merged.comparisons += part.comparisons
        merged.failures += part.failures
        merged.signatures.update(part.signatures)
        merged.notes += [note for note in part.notes if note not in merged.notes]
        merged.calls += part.calls
        merged.cached += part.cached
        _merge_accounts(merged, part)
        for name, (count, total, where) in part.in_training.items():
            before, seen, _ = merged.in_training.get(name, (0, 0, where))
            merged.in_training[name] = (before + count, seen + total, where)
    if finish:
        merged.notes += training_notes(merged)
        _mass_note(merged)
        merged.notes += served_notes(merged)
    return merged


def judge_blocks(
    stories: Sequence[Story],
    rubric: Rubric,
    backends: Sequence[JudgeBackend],
    *,
    settings: JudgeSettings | None = None,
    cache: JudgeCache | None = None,
    block_size: int = 500,
    progress: Callable[[str], None] | None = None,
) -> JudgeRun:
    """:func:`judge_stories` block by block (:func:`judge_blocks_plan`) in this process: the
    local engine's way of judging (:func:`judge_on` with a local executor)."""
    return judge_on(
        LocalExecutor(stories),
        rubric,
        backends,
        settings=settings,
        cache=cache,
        block_size=block_size,
        progress=progress,
    )


def judge_on(
    executor: Executor,
    rubric: Rubric,
    judges: Sequence[JudgeBackend] | BackendSpec,
    *,
    settings: JudgeSettings | None = None,
    cache: JudgeCache | str | None = None,
    block_size: int = 500,
    progress: Callable[[str], None] | None = None,
) -> JudgeRun:
    """Judge the stories an executor holds, in the blocks of :func:`judge_blocks_plan`.

    ``judges``: live backends for an in-process executor, or a
    :class:`~storyeval.judge.backends.BackendSpec` each worker builds its judges from (once
    per process); ``cache``: a cache, or the path of one every worker can reach (a shared
    file system); ``progress``: messages of the first block, in this process only.
    """
    settings = settings or JudgeSettings()
    settings.check()
    plan = judge_blocks_plan(executor.stubs(), settings.mode, block_size)
    shared = (rubric, judges, settings, cache, progress if executor.in_process else None)
    return merge_judge_runs(executor.map_blocks(judge_block, plan, *shared))


def judge_block(
    stories: list[Story],
    block: int,
    rubric: Rubric,
    judges: Sequence[JudgeBackend] | BackendSpec,
    settings: JudgeSettings,
    cache: JudgeCache | str | None,
    progress: Callable[[str], None] | None,
) -> JudgeRun:
    """Judge one block of stories where the executor runs it (judges built from a spec once
    per process; a cache given by path opened for the block)."""
    if isinstance(judges, BackendSpec):
        judges = judges.build()
    opened = JudgeCache(cache) if isinstance(cache, str) else None
    try:
        return judge_stories(
            stories,
            rubric,
            judges,
            settings=settings,
            cache=opened or cache,  # type: ignore[arg-type]
            progress=progress if block == 0 else None,
            finish=False,
        )
    finally:
        if opened is not None:
            opened.close()


def _mass_note(run: JudgeRun) -> None:
    """Warn when the judge put little probability on the answers it was asked for (it was
    answering something else: the prompt's format did not land)."""
    masses = [
        float(j.extra["label_mass"]) for j in run.judgments if j.extra.get("label_mass") is not None
    ]
    low = [m for m in masses if m < LOW_MASS]
    if low:
        run.notes.append(
            f"{len(low)} of {len(masses)} answers put less than {LOW_MASS} of the probability on "
            "the scale's answers: the judge may not be following the format"
        )


def judge_source(
    source: str | Path,
    rubric: Any,
    spec: Any,
    *,
    client: Any,
    settings: Any = None,
    cache_path: str | Path | None = None,
    block_size: int = 500,
    num_cpus: int = 1,
    progress: bool = False,
) -> Any:
    """Judge a story file on a Dask cluster: :func:`~storyeval.judge.core.judge_on` with this
    cluster's executor, in the blocks the local engine judges (so the result equals its).

    ``spec`` is a :class:`storyeval.judge.backends.BackendSpec`; ``cache_path`` an answer
    cache every worker can reach (a shared file system), or None.
    """
    from storyeval.engine.dask import read_source

    executor = read_source(client, source, progress=progress, threads=num_cpus)
    return judge_on(
        executor,
        rubric,
        spec,
        settings=settings,
        cache=str(cache_path) if cache_path else None,
        block_size=block_size,
    )
