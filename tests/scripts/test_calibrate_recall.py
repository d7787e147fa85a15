"""scripts/calibrate_recall.py: the default configuration recalls some, not all, relevant memories
at T2, T3 and T4 in both languages with the offline embedder, almost never an unrelated one, and
never a message without content; the seed's literal values recall nothing."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from services import recall_model as rm
from services.providers.offline import OfflineEmbeddingProvider
from services.study import load_study

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "calibrate_recall.py"


@pytest.fixture(scope="module")
def calibrate_recall():
    spec = importlib.util.spec_from_file_location("calibrate_recall", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["calibrate_recall"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("calibrate_recall", None)


@pytest.fixture(scope="module")
def embedder(calibrate_recall):
    # One embedder for the module so each sample sentence is embedded once.
    return calibrate_recall.MemoEmbedder(OfflineEmbeddingProvider())


@pytest.fixture(scope="module")
def default_report(calibrate_recall, embedder):
    return calibrate_recall.calibrate(load_study(), embedder=embedder)


def test_the_sample_is_bilingual_and_half_of_it_is_held_out(calibrate_recall):
    languages = calibrate_recall.SAMPLE_LANGUAGE
    for language in ("zh", "en"):
        mine = [p for p in calibrate_recall.SAMPLE if languages[p] == language]
        held_out = [p for p in mine if p in calibrate_recall.HELD_OUT]
        assert len(mine) >= 8 and len(held_out) * 2 == len(mine), language
    # every held-out list is disjoint from the development lists
    for language in ("zh", "en"):
        dev = {m for group in calibrate_recall.RULE_CHECK["dev"][language] for m in group}
        held = {m for group in calibrate_recall.RULE_CHECK["held-out"][language] for m in group}
        assert not dev & held


def test_default_configuration_recalls_some_but_not_all_relevant_memories_in_both_languages(default_report):
    assert default_report.params.preset == "calibrated"
    assert default_report.languages == ["en", "zh"]
    for language in ("zh", "en"):
        outcomes = default_report.group(language=language)
        assert list(outcomes) == ["T2", "T3", "T4"]
        for task_id, outcome in outcomes.items():
            where = f"{language} {task_id}"
            assert outcome.memories > 0, where
            assert len(outcome.relevant_recalled) > 0, f"nothing relevant recalled at {where}"
            assert outcome.relevant_share() <= 0.5, f"most relevant memories recalled at {where}"
            assert outcome.share() < 0.25, f"too many memories recalled at {where}"
            assert outcome.unrelated_rate() <= 0.02, f"unrelated memories recalled at {where}"
    assert not default_report.impossible and not default_report.universal
    assert default_report.warnings() == []


def test_held_out_participants_recall_at_t2_and_t3_in_both_languages(default_report):
    """The bounds were chosen on the development participants only. What the held-out ones show is
    recorded in docs/recall_calibration.md; this pins the part that generalised (Chinese T4 did not)."""
    for language in ("zh", "en"):
        held_out = default_report.group("held-out", language)
        for task_id in ("T2", "T3"):
            assert held_out[task_id].relevant_recalled, f"{language} {task_id}"
        assert all(o.relevant_share() <= 0.5 and o.unrelated_rate() <= 0.02 for o in held_out.values()), language
    assert default_report.group("held-out", "en")["T4"].relevant_recalled


def test_messages_without_content_are_never_candidates(calibrate_recall, default_report):
    events = [e for o in default_report.tasks.values() for e in o.events]
    assert events and not any(rm.content_words(e["memory"]) == [] for e in events)
    assert not any(rm.content_words(e["query"]) == [] for e in events)
    assert sum(o.echo_recalls for o in default_report.tasks.values()) <= 1
    assert "好的，谢谢。" in default_report.excluded_memories and "Ok, thanks." in default_report.excluded_memories
    for language in ("zh", "en"):
        # the development lists are judged right; on the held-out lists content is never dropped
        assert default_report.rule_check["dev"][language] == {"content_free_kept": [], "content_dropped": []}
        held_out = default_report.rule_check["held-out"][language]
        content_free, _ = calibrate_recall.RULE_CHECK["held-out"][language]
        assert held_out["content_dropped"] == []
        assert len(held_out["content_free_kept"]) <= 0.25 * len(content_free), held_out


def test_simulation_updates_g_and_resets_t_for_recalled_memories(default_report):
    recalled = [e for o in default_report.tasks.values() for e in o.events if e["recalled"]]
    assert recalled and all(e["g_after"] > e["g_before"] for e in recalled)
    not_recalled = [e for o in default_report.tasks.values() for e in o.events if not e["recalled"]]
    assert all(e["g_after"] == e["g_before"] for e in not_recalled)
    # the T1 PhD memory recalled at T3 (day 9) is 7 days old at T4, not 16
    phd = [e for e in default_report.tasks["T4"].events
           if e["memory"].startswith("I'm applying for PhD") and e["query"].startswith("I got a PhD")]
    assert phd and phd[0]["t"] == pytest.approx(7 / 30, abs=1e-3)


def test_measured_cosines_place_the_recall_bar_above_unrelated_pairs(default_report):
    params = default_report.params
    x_star = rm.required_relevance(0.0, params.g0_base, 0.0, params.threshold, params.salience_bonus)
    for language, pairs in default_report.pair_cosines["dev"].items():
        related, unrelated = np.array(pairs["related"]), np.array(pairs["unrelated"])
        # the embedder separates the kinds only partly: the median related pair beats 90 % of unrelated ones
        assert np.median(related) > np.percentile(unrelated, 90), language
        floor, _ = params.relevance.bounds(language)
        assert floor > np.median(unrelated), language
        # even with no time elapsed, at most 5 % of unrelated pairs would reach the threshold
        recallable = [c for c in unrelated if params.relevance.to_r(c, language) >= x_star]
        assert len(recallable) <= 0.05 * len(unrelated), language


def test_seed_literal_preset_is_flagged_as_impossible(calibrate_recall, embedder):
    report = calibrate_recall.calibrate(load_study(), preset="seed_literal", embedder=embedder)
    assert report.impossible
    assert all(not o.recalled for o in report.tasks.values())
    assert any("IMPOSSIBLE" in w for w in report.warnings())
    two_days = report.gaps.index(2.0)
    assert all(not row["cells"][two_days]["recalled"] for row in report.p_tables["zh"])


def test_a_configuration_that_recalls_unrelated_memories_is_flagged_universal(calibrate_recall, embedder):
    study = load_study(overrides={"memory": {"recall": {"overrides": {
        "relevance": {"floor": 0.70, "ceiling": 0.75, "by_language": {"en": {"floor": 0.6, "ceiling": 0.65}}}}}}})
    report = calibrate_recall.calibrate(study, embedder=embedder)
    assert report.universal
    assert any("UNIVERSAL" in w for w in report.warnings())


def test_bounds_that_starve_one_language_are_reported(calibrate_recall, embedder):
    report = calibrate_recall.calibrate(load_study(), embedder=embedder,
                                        overrides={"relevance": {"floor": 0.93, "ceiling": 0.95}})
    assert not report.group(language="zh")["T2"].recalled
    assert "no relevant memory recalled at T2 in zh" in report.warnings()


def test_main_prints_the_tables_saves_the_png_and_strict_exit_codes(calibrate_recall, embedder, tmp_path, capsys):
    out = tmp_path / "recall.png"
    assert calibrate_recall.main(["--out", str(out), "--strict"], embedder=embedder) == 0
    printed = capsys.readouterr()
    assert "simulated schedule" in printed.out and "p_final for a never-recalled memory" in printed.out
    assert "held-out zh" in printed.out and "candidate rule:" in printed.out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert printed.err == ""
    assert calibrate_recall.main(["--out", str(out), "--preset", "seed_literal", "--strict"], embedder=embedder) == 2
    assert "IMPOSSIBLE" in capsys.readouterr().err


def test_pilot_mode_gives_the_same_recall_as_real_days(calibrate_recall, embedder, default_report):
    pilot = calibrate_recall.calibrate(load_study(), embedder=embedder, day_seconds=120)
    for task_id, outcome in default_report.tasks.items():
        assert pilot.tasks[task_id].recalled == outcome.recalled
