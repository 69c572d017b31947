"""The demo's outputs without their signatures, for the byte-identical comparison in
tests/test_demo_outputs.py (signatures carry the version, which moves; the numbers may not).

Refresh the stored copy only for a change that CHANGELOG.md says moves numbers:
``python tests/demo_snapshot.py OUT_DIR tests/data/demo_outputs``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

SIGNATURE_KEYS = ("signature", "metric_signature")
_VERSION = re.compile(r"storyeval \d+\.\d+\.\d+\S*|version:\d+\.\d+\.\d+\S*")
#: the demo files whose numbers are compared (generation and training are compared elsewhere)
FILES = (
    "describe.csv",
    "scores.jsonl",
    "systems.csv",
    "correlations.csv",
    "agreement.csv",
    "study-analysis/agreement.csv",
    "study-analysis/filtering.csv",
    "study-analysis/raters.csv",
    "study-analysis/summary.csv",
    "study-analysis/tests.csv",
    "cyoa/edit_items.csv",
    "cyoa/edits.csv",
    "cyoa/likert.csv",
    "cyoa/open_answers.csv",
    "cyoa/preferences.csv",
    "cyoa/text_stats.csv",
    "cyoa/report.md",
    "union-negatives.jsonl",
)


def normalised(path: Path) -> str:
    """The file's text with signature columns and version numbers removed."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        kept = [{k: v for k, v in row.items() if k not in SIGNATURE_KEYS} for row in rows]
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in kept)
    elif path.suffix == ".csv":
        reader = list(csv.reader(io.StringIO(text)))
        if reader:
            keep = [i for i, name in enumerate(reader[0]) if name not in SIGNATURE_KEYS]
            buffer = io.StringIO()
            writer = csv.writer(buffer, lineterminator="\n")
            for row in reader:
                writer.writerow([row[i] for i in keep if i < len(row)])
            text = buffer.getvalue()
    return _VERSION.sub("<version>", text)


def snapshot(source: Path, target: Path) -> None:
    for name in FILES:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(normalised(source / name), encoding="utf-8")


if __name__ == "__main__":
    snapshot(Path(sys.argv[1]), Path(sys.argv[2]))
