"""Draw the picture prompt of the example CYOA session (examples/cyoa/lighthouse.png).

Clark (2021) showed writers an illustration (Fig. A.1) as an optional prompt. This draws a simple
night scene for the example study, so the example needs no third-party image.
Run: .venv/bin/python scripts/make_cyoa_image.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Circle, Polygon, Rectangle

TARGET = Path(__file__).resolve().parent.parent / "examples" / "cyoa" / "lighthouse.png"


def main() -> None:
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    ax.set_xlim(0, 60)
    ax.set_ylim(0, 40)
    ax.axis("off")
    ax.add_patch(Rectangle((0, 12), 60, 28, color="#1b2a4a"))  # night sky
    ax.add_patch(Rectangle((0, 0), 60, 12, color="#23486b"))  # sea
    ax.add_patch(Circle((50, 33), 3, color="#f2e9c9"))  # moon
    for x, y in ((8, 35), (15, 30), (27, 37), (38, 31), (56, 24), (4, 26)):
        ax.add_patch(Circle((x, y), 0.3, color="white"))
    ax.add_patch(Polygon([(6, 12), (22, 12), (18, 16), (9, 16)], color="#3b3b3b"))  # rock
    ax.add_patch(Polygon([(11, 16), (16, 16), (15, 30), (12, 30)], color="#e9e4da"))  # tower
    for y in (19, 24):
        ax.add_patch(Rectangle((11.3, y), 4.4, 1.4, color="#b33a3a"))
    ax.add_patch(Rectangle((11.5, 30), 4, 2.5, color="#f7d154"))  # lamp room
    ax.add_patch(Polygon([(11, 32.5), (16, 32.5), (13.5, 35)], color="#b33a3a"))
    ax.add_patch(Polygon([(15.5, 31.5), (40, 35), (40, 28)], color="#f7d154", alpha=0.25))
    ax.add_patch(Polygon([(38, 7), (48, 7), (46, 5), (40, 5)], color="#6b4226"))  # boat
    ax.plot([43, 43], [7, 13], color="#d8d8d8", lw=1.5)
    ax.add_patch(Polygon([(43, 13), (43, 8), (47, 8)], color="#f0f0f0"))
    fig.subplots_adjust(0, 0, 1, 1)
    fig.savefig(TARGET)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
