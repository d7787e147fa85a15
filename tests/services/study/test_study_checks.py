"""Study-file mistakes a lab makes are refused at start-up, naming what to fix (issue 18 item 9), and
reminders that could carry no link refuse to start (item 8)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from config import Settings
from services.study.definition import StudyDefinitionError, load_study

PANELS_DOC = Path(__file__).resolve().parents[3] / "docs" / "panels.md"
PROLIFIC = "https://app.prolific.com/submissions/complete?cc={completion_code}"


def _readme_prolific_example() -> dict:
    section = PANELS_DOC.read_text(encoding="utf-8").split("## Panels (Prolific, Credamo, wjx)", 1)[1]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def test_the_documented_prolific_example_is_a_study_that_starts():
    study = load_study(overrides=_readme_prolific_example())
    paid = [t for t, amount in study.payments.per_task.items() if amount > 0]
    assert paid and all(study.panel.tasks[t].completion_code for t in paid)


@pytest.mark.parametrize("override, message", [
    # pays T1-T4, codes only for T1/T2 (README's old example)
    ({"panel": {"tasks": {"T1": {"completion_code": "C1"}, "T2": {"completion_code": "C2"}}},
      "payments": {"per_task": {"T1": 2.25, "T2": 2.25, "T3": 2.25, "T4": 3.0}}},
     "payments.per_task pays T3 but panel.tasks.T3.completion_code is missing"),
    ({"panel": {"tasks": {"T1": {"completion_code": "C1",
                                 "redirect_url": "https://app.prolific.com/submissions/complete"}}}},
     "panel.tasks.T1.redirect_url carries no code"),
    ({"panel": {"tasks": {"T1": {"redirect_url": PROLIFIC}}}}, "has {completion_code} but no code"),
    ({"panel": {"tasks": {"T1": {"completion_code": "C1", "incomplete_code": "C1"}}}},
     "incomplete_code equals its completion_code"),
    ({"panel": {"tasks": {"T1": {"completion_code": "C1", "redirect_url": "ftp://x/{completion_code}"}}}},
     "must be an http(s) URL"),
    ({"panel": {"full_code": "FULL", "full_redirect_url": "https://app.prolific.com/complete"}},
     "panel.full_redirect_url carries no code"),
    ({"panel": {"max_participants": 0}}, "panel.max_participants must be at least 1"),
    ({"panel": {"session_parameters": ["pid"]}}, "other than panel.id_parameter"),
    ({"panel": {"id_case_sensitive": "no"}}, "panel.id_case_sensitive must be bool"),
    ({"timing": {"min_participant_messages": -1}}, "must not be negative"),
    ({"memory": {"recall": {"presets": {"anchored": {"relevance": {
        "false_recall_budget_by_language": {"fr": 0.03}}}}}}},
     "false_recall_budget_by_language is 'fr'; allowed: zh, en"),
    ({"payments": {"pay_incomplete": 1}}, "payments.pay_incomplete must be bool"),
    ({"panel": {"tasks": {"T1": {"incomplete_cod": "X"}}}}, "unknown key panel.tasks.T1.incomplete_cod"),
])
def test_study_file_mistakes_are_refused_at_start(override, message):
    with pytest.raises(StudyDefinitionError, match=re.escape(message)):
        load_study(overrides=override)


def test_a_literal_code_in_the_redirect_url_is_accepted():
    study = load_study(overrides={"panel": {"tasks": {"T1": {
        "completion_code": "C1ABC", "redirect_url": "https://app.prolific.com/submissions/complete?cc=C1ABC"}}}})
    assert study.panel.tasks["T1"].redirect_url.endswith("C1ABC")


def test_reminders_without_a_public_address_refuse_to_start(monkeypatch):
    monkeypatch.setenv("REMINDERS_ENABLED", "1")
    monkeypatch.delenv("PUBLIC_BASE_URL", raising=False)
    monkeypatch.delenv("REMINDER_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="REMINDERS_ENABLED=1 needs PUBLIC_BASE_URL"):
        Settings.from_env(secret_key="x")
    monkeypatch.setenv("PUBLIC_BASE_URL", "https://study.example.org")
    assert Settings.from_env(secret_key="x").public_base_url == "https://study.example.org"
