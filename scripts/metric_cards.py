"""Write the metric cards docs/metrics/NAME.md, one per registered metric.

A card is rendered by :func:`storyeval.metrics.cards.render_card` from the metric's registry
entry (the facts) and the narrative written beside its definition
(``@metric(..., card=MetricCard(...))``), so a card cannot drift from the code.

Run: python scripts/metric_cards.py            (write every card)
     python scripts/metric_cards.py --check    (exit 1 if a card is missing or stale)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "metrics"


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
    if stale:
        print("\n".join(stale))
        raise SystemExit(1)
    if not args.check:
        print(f"wrote {len(specs)} cards to {DOCS}")


if __name__ == "__main__":
    main()
