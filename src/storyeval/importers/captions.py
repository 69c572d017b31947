"""Flickr 8K's expert judgments of image captions (Hodosh et al. 2013), as Kane et al. (2020,
Table 1) and SPICE evaluate metrics on them.

``flickr8k``
    ``ExpertAnnotations.txt``: tab-separated ``IMAGE  CAPTION_ID  S1  S2  S3``, three experts'
    scores (1: the caption is unrelated to the image ... 4: it describes it without any error)
    of a caption ``CAPTION_ID`` (``OTHER_IMAGE.jpg#N``) retrieved for ``IMAGE``; the captions
    are in ``Flickr8k.token.txt`` (``IMAGE.jpg#N<TAB>caption``), found next to the file unless
    given (``captions``). Each judged pair becomes a story (the caption; system ``retrieved``;
    prompt_id the image) whose references are the image's own five captions, the candidate
    itself left out when it is one of them (as SPICE does), and three judgments on
    ``relevance`` (raters ``expert1``-``expert3``). Kendall's tau of a metric with the experts'
    mean is the paper's Table 1 (``storyeval correlate --level pooled -m kendall``).

Examples
--------
>>> import pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "Flickr8k.token.txt").write_text(
...     "a.jpg#0\\tA dog runs .\\na.jpg#1\\tA brown dog runs on grass .\\nb.jpg#0\\tTwo kids play .\\n")
>>> _ = (folder / "ExpertAnnotations.txt").write_text("a.jpg\\tb.jpg#0\\t1\\t1\\t2\\na.jpg\\ta.jpg#1\\t4\\t4\\t3\\n")
>>> result = import_flickr8k(folder / "ExpertAnnotations.txt")
>>> [(s.story, s.references) for s in result.stories]
[('Two kids play .', ['A dog runs .', 'A brown dog runs on grass .']), ('A brown dog runs on grass .', ['A dog runs .'])]
>>> [j.value for j in result.judgments if j.item_id == result.stories[1].id]
[4.0, 4.0, 3.0]
"""

from __future__ import annotations

from pathlib import Path

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story
from storyeval.importers.base import ImportResult, require_file, to_rating, utf8_lines

CAPTIONS_FILE = "Flickr8k.token.txt"


def _captions(path: Path) -> dict[str, str]:
    problems: list[DataProblem] = []
    found: dict[str, str] = {}
    for number, line in utf8_lines(path, problems):
        if not line.strip():
            continue
        key, _, caption = line.partition("\t")
        if "#" not in key or not caption.strip():
            problems.append(DataProblem(str(path), number, "expected 'IMAGE.jpg#N<TAB>caption'"))
            continue
        found[key.strip()] = caption.strip()
    if problems:
        raise DataFileError(problems)
    return found


def import_flickr8k(path: str | Path, *, captions: str | Path | None = None) -> ImportResult:
    """Import Flickr 8K's expert judgments (see the module docstring)."""
    file_path = require_file(path)
    caption_path = require_file(
        captions if captions is not None else file_path.with_name(CAPTIONS_FILE)
    )
    texts = _captions(caption_path)
    own: dict[str, list[str]] = {}
    for key in texts:
        own.setdefault(key.split("#", 1)[0], []).append(key)
    result = ImportResult("flickr8k", str(file_path))
    problems: list[DataProblem] = []
    for number, line in utf8_lines(file_path, problems):
        if not line.strip():
            continue
        cells = line.split("\t")
        try:
            image, caption_id, ratings = cells[0].strip(), cells[1].strip(), cells[2:5]
            if len(ratings) != 3:
                raise ValueError("expected IMAGE, CAPTION_ID and three scores")
            values = [to_rating(v) for v in ratings]
            if caption_id not in texts:
                raise ValueError(f"caption {caption_id!r} is not in {caption_path.name}")
            if image not in own:
                raise ValueError(f"image {image!r} has no caption in {caption_path.name}")
        except (ValueError, IndexError) as exc:
            problems.append(DataProblem(str(file_path), number, str(exc)))
            continue
        references = [texts[k] for k in own[image] if k != caption_id]
        item = f"{image}|{caption_id}"
        extra = {"prompt_id": image}
        result.stories.append(
            Story(item, "", texts[caption_id], references, system="retrieved", extra=extra)
        )
        result.judgments += [
            Judgment(item, f"expert{k}", "relevance", v, extra={"system": "retrieved", **extra})
            for k, v in enumerate(values, start=1)
        ]
    if problems:
        raise DataFileError(problems)
    return result
