"""What the rating protocols (Likert, side-by-side) share: criteria on a 5- or 7-point scale
with endpoint or point labels, reference ratings for training, and the criteria table of the
design statement."""

from __future__ import annotations

from storyeval.base.yamlfile import Loc
from storyeval.human.model import Criterion, StudyConfig
from storyeval.human.protocols.base import Problem, StatementPart, StudyProtocol, cell

RATING_FEEDBACK = """\
{% for pos in positions %}{{ m.show_text(texts[pos - 1], labels[pos - 1] if positions | length > 1 else None, config.show_prompt) }}{% endfor %}
<table class="feedback">
  <tr><th>Question</th><th>Your rating{{ " (" ~ labels | join(" / ") ~ ")" if positions | length > 1 }}</th><th>Reference rating</th></tr>
  {% for criterion in config.criteria %}
  <tr><td>{{ criterion.question }}</td>
    <td>{% for key in rating_keys(criterion) %}{{ given.get(key, "-") }}{{ " / " if not loop.last }}{% endfor %}</td>
    <td>{% for key in rating_keys(criterion) %}{{ example.answers.get(key, "-") }}{{ " / " if not loop.last }}{% endfor %}</td></tr>
  {% endfor %}
</table>
"""


def check_labels(criterion: Criterion, loc: Loc, problem: Problem) -> None:
    """Labels for the two endpoints or every point of the scale, none empty."""
    scale = criterion.scale or 5
    if criterion.labels is None:
        problem(loc, f"required: labels for the endpoints (1 and {scale}) or for every point")
        return
    if isinstance(criterion.labels, list):
        if len(criterion.labels) != scale:
            problem(
                loc, f"a list of labels must name all {scale} points; got {len(criterion.labels)}"
            )
        return
    points = set(criterion.labels)
    outside = sorted(p for p in points if not 1 <= p <= scale)
    if outside:
        problem(loc, f"points must be between 1 and {scale}; got {outside}")
        return
    if points != {1, scale} and points != set(range(1, scale + 1)):
        missing = sorted(set(range(1, scale + 1)) - points)
        problem(loc, f"label the two endpoints (1 and {scale}) or every point; missing {missing}")
    for point, label in criterion.labels.items():
        if not str(label).strip():
            problem((*loc, point), "a label must not be empty")


class RatingProtocol(StudyProtocol):
    """Criteria rated on a scale; reference ratings calibrate training (never graded)."""

    criteria = "scaled"
    agreement_level = "ordinal"
    compares_conditions = True

    def check(self, config: StudyConfig, problem: Problem) -> None:
        for i, criterion in enumerate(config.criteria):
            if criterion.scale is None:
                problem(("criteria", i, "scale"), "required: the number of points (5 or 7)")
            else:
                check_labels(criterion, ("criteria", i, "labels"), problem)

    def criteria_lines(self, config: StudyConfig) -> StatementPart:
        """The criteria and their scales as lines of the design statement."""
        lines = [
            "| criterion | question (exact wording) | definition shown | scale | labels |",
            "|---|---|---|---|---|",
        ]
        for c in config.criteria:
            labels = ", ".join(f'{p} = "{cell(lab)}"' for p, lab in c.point_labels().items())
            definition = cell(c.definition) if c.definition else "(none)"
            lines.append(
                f"| {c.name} | {cell(c.question)} | {definition} | "
                f"{c.scale}-point | {c.labelling}: {labels} |"
            )
        answered = {
            "criteria": True,
            "scale": True,
            "labels": True,
            "definitions": all(c.definition for c in config.criteria),
        }
        return StatementPart(lines, answered)
