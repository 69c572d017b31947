"""Write the metric cards docs/metrics/NAME.md, one per registered metric.

A card is rendered by :func:`storyeval.metrics.cards.render_card` from the metric's registry
entry (the facts) and the narrative written beside its definition
(``@metric(..., card=MetricCard(...))``), so a card cannot drift from the code.

It also writes docs/metrics/index.md: one row per metric with the facts of its entry and its
per-system values on the example corpus, read from the demo's per-system table that
tests/test_demo_outputs.py keeps byte-identical (tests/data/demo_outputs/systems.csv), so no
number in it is typed by hand.

It also keeps the README's count of registered metrics ("any of the N registered metrics")
equal to the registry's.

Run: python scripts/metric_cards.py            (write every card and the index)
     python scripts/metric_cards.py --check    (exit 1 if a card or the index is missing or stale)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "metrics"
DEMO_SYSTEMS = ROOT / "tests" / "data" / "demo_outputs" / "systems.csv"


def _demo_values() -> tuple[list[str], dict[tuple[str, str], dict[str, str]]]:
    """The demo's systems (in table order) and, per (metric, statistic), each system's
    estimate as text ("-" where the metric had no story of the system)."""
    import csv

    systems: list[str] = []
    values: dict[tuple[str, str], dict[str, str]] = {}
    with open(DEMO_SYSTEMS, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["system"] not in systems:
                systems.append(row["system"])
            shown = f"{float(row['estimate']):.3g}" if row["estimate"] and row["n"] != "0" else "-"
            values.setdefault((row["metric"], row["statistic"]), {})[row["system"]] = shown
    return systems, values


def render_index(specs: list) -> str:  # type: ignore[type-arg]
    """The metric index: name, what it measures, inputs, direction, default suite and the
    per-system values of the demo run."""
    systems, values = _demo_values()
    lines = [
        "# Metric index",
        "",
        "Every registered metric, with the facts of its registry entry and its per-system",
        "values on the example corpus from `make demo` (systems: "
        + ", ".join(f"`{s}`" for s in systems)
        + "; item means, and corpus statistics after a semicolon; `-`: no story of that system",
        "has the metric's inputs, blank: not in the demo). Written by `make cards`.",
        "",
        "| metric | measures | reads | better | default suite | example corpus |",
        "|---|---|---|---|---|---|",
    ]
    for spec in specs:
        shown = []
        for statistic in [spec.item_statistic, *(c.name for c in spec.corpus)]:
            found = values.get((spec.name, statistic))
            if found:
                shown.append(" / ".join(found.get(s, "-") for s in systems))
        ok, _ = spec.runnable_offline()
        lines.append(
            f"| [`{spec.name}`]({spec.name}.md) | {spec.description} | "
            f"{', '.join(spec.inputs)}{'; ' + spec.model if spec.model else ''} | "
            f"{spec.direction} | {'yes' if spec.default and ok else 'no'} | {'; '.join(shown)} |"
        )
    return "\n".join(lines) + "\n"


def _readme_count(count: int, *, check: bool) -> list[str]:
    """Keep README.md's "any of the N registered metrics" true; the problem when checking."""
    import re

    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(r"any of the (\d+) registered metrics")
    found = pattern.search(text)
    if found is None:
        return [f"{readme}: the sentence 'any of the N registered metrics' is missing"]
    if int(found.group(1)) == count:
        return []
    if check:
        return [
            f"{readme} says {found.group(1)} registered metrics; there are {count}: run python scripts/metric_cards.py"
        ]
    readme.write_text(pattern.sub(f"any of the {count} registered metrics", text), encoding="utf-8")
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a card is missing or stale")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from storyeval.metrics import all_metrics
    from storyeval.metrics.cards import render_card

    DOCS.mkdir(parents=True, exist_ok=True)
    stale = []
    specs = all_metrics()
    for spec in specs:
        card = DOCS / f"{spec.name}.md"
        content = render_card(spec)
        if args.check:
            if not card.is_file() or card.read_text(encoding="utf-8") != content:
                stale.append(f"{card} is missing or stale: run python scripts/metric_cards.py")
        else:
            card.write_text(content, encoding="utf-8")
    index = DOCS / "index.md"
    content = render_index(specs)
    if args.check:
        if not index.is_file() or index.read_text(encoding="utf-8") != content:
            stale.append(f"{index} is missing or stale: run python scripts/metric_cards.py")
    else:
        index.write_text(content, encoding="utf-8")
    stale += _readme_count(len(specs), check=args.check)
    if stale:
        print("\n".join(stale))
        raise SystemExit(1)
    if not args.check:
        print(f"wrote {len(specs)} cards to {DOCS}")


if __name__ == "__main__":
    main()
