import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import Settings
from services.study.definition import StudyDefinitionError, load_study


def test_study_config_file_replaces_parts_of_the_definition(tmp_path, monkeypatch):
    path = tmp_path / "study.json"
    path.write_text(json.dumps({
        "enabled_conditions": ["L1", "L4"],
        "timing": {"task_active_seconds": 600, "min_active_seconds": 120},
        "tasks": [{"id": "A", "unlock_offset_days": 0, "title": {"zh": "甲", "en": "A"},
                   "instructions": {"zh": "聊", "en": "chat"}, "questionnaire": ["satisfaction"]}],
    }), encoding="utf-8")
    monkeypatch.setenv("STUDY_CONFIG", str(path))
    assert load_study().enabled_conditions != ("L1", "L4")  # only the entry point reads the environment
    study = Settings.from_env(database_url="sqlite://", secret_key="x").study
    assert study.enabled_conditions == ("L1", "L4")
    assert study.timing.task_active_seconds == 600
    assert study.timing.idle_gap_seconds == 120  # untouched keys keep their defaults
    assert [t.id for t in study.tasks] == ["A"]


def test_yaml_study_config(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("enabled_conditions: [L2, L3, S1, R1]\nassignment:\n  block_multiple: 2\n", encoding="utf-8")
    study = load_study(path)
    assert study.enabled_conditions == ("L2", "L3", "S1", "R1")
    assert study.assignment.block_multiple == 2


@pytest.mark.parametrize("override,message", [
    ({"enabled_conditions": ["L9"]}, "enabled_conditions"),
    ({"enabled_conditions": []}, "enabled_conditions"),
    ({"timing": {"min_active_seconds": 5000}}, "min_active_seconds"),
])
def test_invalid_study_definitions_fail_at_start(tmp_path, override, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(override))
    with pytest.raises(ValueError, match=message):
        load_study(path)


def test_pilot_mode_from_environment(monkeypatch):
    monkeypatch.setenv("PILOT_DAY_SECONDS", "120")
    settings = Settings.from_env()
    assert settings.pilot_mode
    assert settings.time_scale == pytest.approx(120 / 86400)
    monkeypatch.setenv("PILOT_DAY_SECONDS", "0")
    with pytest.raises(ValueError):
        Settings.from_env()


def test_rate_limit_storage_from_environment(monkeypatch):
    monkeypatch.delenv("RATE_LIMIT_STORAGE", raising=False)
    assert Settings.from_env().rate_limit_storage == "memory"
    monkeypatch.setenv("RATE_LIMIT_STORAGE", " Database ")
    assert Settings.from_env().rate_limit_storage == "database"
    monkeypatch.setenv("RATE_LIMIT_STORAGE", "redis")
    with pytest.raises(ValueError, match="RATE_LIMIT_STORAGE"):
        Settings.from_env()


def test_secrets_come_only_from_the_environment(monkeypatch):
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings.from_env()
    assert settings.dashscope_api_key is None and settings.openai_api_key is None
    assert settings.llm_providers == ["offline"]
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-from-env")
    assert Settings.from_env().dashscope_api_key == "sk-from-env"


@pytest.mark.parametrize("override,message", [
    ({"timing": {"task_active_secs": 600}}, "unknown key timing.task_active_secs; allowed here: task_active_seconds"),
    ({"enabled_condition": ["L1"]}, "unknown key enabled_condition; allowed here: name, default_language"),
    ({"memory": {"recall": {"preset": "calibratd"}}},
     "memory.recall.preset is 'calibratd'; allowed: anchored, calibrated, cosine_bands, seed_literal"),
    ({"memory": {"recall": {"overrides": {"top_kk": 3}}}}, "memory.recall"),
    ({"memory": {"recall": {"overrides": {"relevance": {"false_recall_budget": "2%"}}}}},
     "memory.recall.overrides.relevance.false_recall_budget must be float"),
    ({"memory": {"recall": {"overrides": {"relevance": {"false_recall_budget": 0.3}}}}},
     "false_recall_budget must lie in (0, "),
    ({"memory": {"recent_turns_L2": 9}}, "unknown key memory.recent_turns_L2"),
    ({"memory": {"retrieval": {"fusion": {"lexicl": 1.0}}}}, "unknown key memory.retrieval.fusion.lexicl"),
    ({"memory": {"retrieval": {"fusion": {"lexical": -1.0}}}}, "fusion weights must be non-negative"),
    ({"memory": {"retrieval": {"k1": "1.2"}}}, "memory.retrieval.k1 must be float"),
    ({"memory": {"retrieval": {"b": 1.5}}}, "0 <= b <= 1"),
    ({"memory": {"s1": {"candidate_pool": "ten"}}}, "memory.s1.candidate_pool must be int"),
    ({"memory": {"recall": {"presets": {"calibrated": {"relevance": {"model": {"default": {
        "intercept": 0.0, "coef": {"fused": -1.0}}}}}}}}}, "r must rise with every score"),
    ({"conditions": {"L3": {"name": "gist", "recent_turns": 3, "gist_max_chars": 500}}},
     "unknown key conditions.L3.gist_max_chars; allowed here: name, recent_turns"),
    ({"limits": {"max_message_chars": "4000"}}, "limits.max_message_chars must be int"),
    ({"default_language": "fr"}, "default_language is 'fr'; allowed: zh, en"),
    ({"system_prompts": {"L1": {"zh": "无", "de": "nichts"}}}, "unknown key system_prompts.L1.de"),
    ({"tasks": [{"id": "T1", "unlock_offset_days": 0, "title": {"zh": "甲", "en": "A"},
                 "instructions": {"zh": "聊", "en": "chat"}, "questionnaire": ["satisfactoin"]}]},
     "tasks.T1.questionnaire names unknown instrument 'satisfactoin'"),
])
def test_unknown_keys_typos_and_unknown_presets_are_refused_naming_them(tmp_path, override, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(override), encoding="utf-8")
    with pytest.raises(StudyDefinitionError) as refused:
        load_study(path)
    assert message in str(refused.value)


def test_a_key_given_twice_in_a_json_study_file_is_refused(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text('{"timing": {"min_active_seconds": 120, "min_active_seconds": 60}}', encoding="utf-8")
    with pytest.raises(StudyDefinitionError, match="duplicate key 'min_active_seconds'"):
        load_study(path)


def test_a_key_given_twice_in_a_yaml_study_file_is_refused(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("enabled_conditions: [L1, L2]\nenabled_conditions: [L3]\n", encoding="utf-8")
    with pytest.raises(StudyDefinitionError, match="duplicate key 'enabled_conditions'"):
        load_study(path)


def test_the_study_is_frozen_and_one_parameter_has_one_home():
    study = load_study()
    with pytest.raises(AttributeError):
        study.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        study.definition["timing"]["min_active_seconds"] = 1  # type: ignore[index]
    assert "recent_turns_L2" not in study.definition["memory"]
    longer = study.with_overrides({"conditions": {"L2": {"recent_turns": 9}}})
    assert longer.conditions["L2"].recent_turns == 9 and study.conditions["L2"].recent_turns == 7
    assert longer.memory.recall == study.memory.recall  # resolved once, typed


def test_make_run_refuses_a_bad_study_before_serving(tmp_path):
    """`make run` runs scripts/migrate.py, then app.py: both stop with the problem named, nothing served."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"memory": {"recall": {"preset": "calibratd"}}}), encoding="utf-8")
    env = {**os.environ, "STUDY_CONFIG": str(path), "DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
           "SECRET_KEY": "test", "PORT": "1"}
    root = Path(__file__).resolve().parent.parent
    for script in ("scripts/migrate.py", "app.py"):
        done = subprocess.run([sys.executable, script], cwd=root, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode != 0
        assert ("memory.recall.preset is 'calibratd'; allowed: anchored, calibrated, cosine_bands, seed_literal"
                in done.stderr)
        assert "AI Memory Lab on http" not in done.stdout
    assert not (tmp_path / "x.db").exists()
