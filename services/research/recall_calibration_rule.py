"""The pre-registered decision rule of the recall calibration: each language's evaluation participants pooled
(held-out and blind together), each target judged met / within error / missed with a one-sided 95 % Wilson bound
(services.study.evidence), and the decay shape T2 above T4 by more than its error. The report and the operating
curve both judge with it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.research.recall_calibration_replay import TARGETS, UNRELATED_MAX, TaskOutcome
from services.study import evidence

# Evaluation groups of each language, by the participants' splits in the sample files: the rule judges "pooled"
# (held-out and blind together); "open" (the held-out participants written with the earlier ones as a model of
# format) and "blind" are judged on their own for information.
EVALUATION_GROUPS: dict[str, tuple[str, ...]] = {"pooled": ("held-out", "blind"), "open": ("held-out",),
                                                 "blind": ("blind",)}
JUDGED_GROUP = "pooled"
GROUP_LABELS = {"pooled": "held-out + blind", "open": "held-out (open)", "blind": "blind"}
SHAPE = ("T2", "T4")  # the decay shape: the first task's share above the second's by more than its error


@dataclass(frozen=True)
class Judgement:
    """The pre-registered targets judged on one group of one language's evaluation participants."""

    language: str
    group: str  # a key of EVALUATION_GROUPS
    targets: list[evidence.Verdict]
    shape: evidence.Difference

    @property
    def passed(self) -> bool:
        return evidence.passes(self.targets, [self.shape])

    def missed(self) -> list[evidence.Verdict]:
        return [v for v in self.targets if not v.ok]

    def within_error(self) -> list[evidence.Verdict]:
        return [v for v in self.targets if v.verdict == "within_error"]

    def target_dicts(self) -> list[dict[str, Any]]:
        """Each verdict as reports and JSON carry it, with what it is about (for a translated label)."""
        about = [(task, "relevant") for task in TARGETS] + [(task, "unrelated") for task in TARGETS]
        return [v.as_dict() | {"language": self.language, "group": self.group, "task": task, "measure": measure}
                for v, (task, measure) in zip(self.targets, about, strict=True)]

    def shape_dict(self) -> dict[str, Any]:
        return self.shape.as_dict() | {"first": list(self.shape.first), "second": list(self.shape.second),
                                       "language": self.language, "group": self.group, "tasks": list(SHAPE)}


def _label(language: str, group: str) -> str:
    return language if group == JUDGED_GROUP else f"{language} {group}"


def judge_group(tasks: dict[str, TaskOutcome], language: str, group: str = JUDGED_GROUP) -> Judgement:
    """Judge one group's outcomes: each task's relevant share against TARGETS, each task's unrelated share
    against UNRELATED_MAX, and the decay shape. Names read "zh T2 relevant recalled" (the judged group) or
    "zh blind T3 unrelated recalled"; a task without data is "no_data", which fails like a miss."""
    label = _label(language, group)
    targets: list[evidence.Verdict] = []
    for task_id, minimum in TARGETS.items():
        o = tasks.get(task_id) or TaskOutcome(task_id)
        targets.append(evidence.judge(f"{label} {task_id} relevant recalled", len(o.relevant_recalled),
                                      len(o.relevant), minimum, "at_least"))
    for task_id in TARGETS:
        o = tasks.get(task_id) or TaskOutcome(task_id)
        targets.append(evidence.judge(f"{label} {task_id} unrelated recalled", o.unrelated_recalls,
                                      o.unrelated_candidates, UNRELATED_MAX, "at_most"))
    first, second = (tasks.get(t) or TaskOutcome(t) for t in SHAPE)
    shape = evidence.difference(f"{label} {SHAPE[0]} above {SHAPE[1]}",
                                (len(first.relevant_recalled), len(first.relevant)),
                                (len(second.relevant_recalled), len(second.relevant)))
    return Judgement(language, group, targets, shape)
