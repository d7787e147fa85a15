import json

import pytest

from config import Settings, load_study


def test_study_config_file_replaces_parts_of_the_definition(tmp_path, monkeypatch):
    path = tmp_path / "study.json"
    path.write_text(json.dumps({
        "enabled_conditions": ["L1", "L4"],
        "timing": {"task_active_seconds": 600, "min_active_seconds": 120},
        "tasks": [{"id": "A", "unlock_offset_days": 0, "title": {"zh": "甲", "en": "A"},
                   "instructions": {"zh": "聊", "en": "chat"}, "questionnaire": ["satisfaction"]}],
    }), encoding="utf-8")
    monkeypatch.setenv("STUDY_CONFIG", str(path))
    study = load_study()
    assert study["enabled_conditions"] == ["L1", "L4"]
    assert study["timing"]["task_active_seconds"] == 600
    assert study["timing"]["idle_gap_seconds"] == 120  # untouched keys keep their defaults
    assert [t["id"] for t in study["tasks"]] == ["A"]


def test_yaml_study_config(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("enabled_conditions: [L2, L3, S1, R1]\nassignment:\n  block_multiple: 2\n", encoding="utf-8")
    study = load_study(path)
    assert study["enabled_conditions"] == ["L2", "L3", "S1", "R1"]
    assert study["assignment"]["block_multiple"] == 2


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


def test_secrets_come_only_from_the_environment(monkeypatch):
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings.from_env()
    assert settings.dashscope_api_key is None and settings.openai_api_key is None
    assert settings.llm_providers == ["offline"]
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-from-env")
    assert Settings.from_env().dashscope_api_key == "sk-from-env"
