"""The probe-persona loader: the fixture loads; every problem of a bad file is listed with its place."""
import copy
import json

import pytest

from services.research.probes import personas as pp

FIXTURE = "tests/fixtures/probe_personas_small.json"


def fixture_data():
    with open(FIXTURE, encoding="utf-8") as handle:
        return json.load(handle)


def test_the_fixture_loads_with_its_splits_kinds_and_planting_messages():
    personas = pp.load_probe_file(FIXTURE)
    assert [(p.id, p.language, p.split) for p in personas] == [("zh_t01", "zh", "dev"), ("en_t01", "en", "held-out")]
    zh = personas[0]
    assert zh.planted_by("peanut_allergy") == [2]
    assert [t.kind for t in zh.script["T1"]][:3] == ["filler", "plant", "plant"]
    assert {t.kind for t in zh.script["T3"]} == {"filler", "explicit", "implicit", "control"}
    assert len(zh.probes()) == 8
    assert [p.id for p in pp.select(personas, languages=["en"])] == ["en_t01"]
    assert [p.id for p in pp.select(personas, splits=["dev"])] == ["zh_t01"]
    with pytest.raises(ValueError, match="unknown language or split: dve"):
        pp.select(personas, splits=["dve"])


def test_every_problem_is_listed_with_its_place_and_nothing_is_loaded():
    data = fixture_data()
    bad = copy.deepcopy(data)
    zh = bad["personas"]["zh_t01"]
    zh["split"] = "train"
    zh["T2"][1][2] = "explict"
    zh["T2"][2][1] = ["peanut_allergy"]  # a control naming a fact
    zh["T3"][1] = ["only text"]
    zh["T4"][1][1] = ["no_such_fact"]
    bad["personas"]["en_t01"]["T2"][3][1] = []  # an explicit probe naming nothing
    with pytest.raises(pp.ProbeFileError) as error:
        pp.parse_probe_data(bad, "bad.json")
    problems = error.value.problems
    assert "zh_t01: split 'train' is not one of dev, held-out, blind" in problems
    assert any(p.startswith("zh_t01.T2[1]: kind 'explict'") for p in problems)
    assert "zh_t01.T2[2]: a control turn names no fact, got ['peanut_allergy']" in problems
    assert any(p.startswith("zh_t01.T3[1]: a turn is [text, [fact ids], kind]") for p in problems)
    assert "zh_t01.T4[1]: fact id(s) no_such_fact not among the persona's facts" in problems
    assert "en_t01.T2[3]: an explicit probe must name the fact(s) it asks about" in problems
    assert str(error.value).startswith("bad.json: 6 problem(s)")


def test_a_probe_about_a_fact_planted_nowhere_is_refused():
    data = fixture_data()
    data["personas"]["en_t01"]["T1"][5][1] = []  # spanish is no longer planted, but asked at T4
    with pytest.raises(pp.ProbeFileError, match=r"en_t01.T4\[4\]: asks about spanish, planted in no T1 message"):
        pp.parse_probe_data(data)


@pytest.mark.parametrize("content, problem", [("{", "not valid JSON"), ('{"personas": {}}', "non-empty 'personas'")])
def test_unreadable_files_say_why(tmp_path, content, problem):
    path = tmp_path / "p.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(pp.ProbeFileError, match=problem):
        pp.load_probe_file(path)
    with pytest.raises(pp.ProbeFileError, match="no such file"):
        pp.load_probe_file(tmp_path / "missing.json")


def test_a_persona_id_in_two_files_is_refused():
    with pytest.raises(pp.ProbeFileError, match="persona id zh_t01 appears twice"):
        pp.load_probe_files([FIXTURE, FIXTURE])


def test_the_studys_probe_set_loads_with_its_registered_splits():
    """data/probes (written blind, issue 27): 16 personas per language, dev 01-08, held-out 09-12, blind 13-16."""
    personas = pp.load_probe_files(pp.DEFAULT_FILES.values())
    for language in ("zh", "en"):
        mine = {p.id: p.split for p in personas if p.language == language}
        assert len(mine) == 16
        for pid, split in mine.items():
            number = int(pid.rsplit("p", 1)[1])
            assert split == ("dev" if number <= 8 else "held-out" if number <= 12 else "blind"), pid
