"""The hybrid retriever: BM25 (lucene variant, k1 1.2, b 0.5) + cosine, z-scored and fused.

The expected numbers below are worked out by hand from the formulas, not taken from the code:

    idf(t)     = ln(1 + (N - df + 0.5) / (df + 0.5))
    bm25(t, d) = idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))
    z(x)       = (x - mean) / population std, over the participant's memories for the query
    fused      = 1.5 * z(bm25) + 1.0 * z(cosine)
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from services.recall.retrieval import (
    FusionWeights,
    HybridRetriever,
    RetrievalDoc,
    exchange_text,
    neighbour_text,
    top_k,
    zscore,
)


def vec(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def three_docs() -> list[RetrievalDoc]:
    # Lexical tokens: d0 [coffee] (|d| 1), d1 [tea, coffee] (|d| 2, "coffee" from its neighbour),
    # d2 [bread] (|d| 1); avgdl = 4/3.
    return [
        RetrievalDoc(10, "coffee", "", vec(1, 0)),
        RetrievalDoc(11, "tea", "coffee", vec(0, 1)),
        RetrievalDoc(12, "bread", "", vec(0.6, 0.8)),
    ]


def test_fusion_matches_the_hand_computed_example():
    # "coffee": N = 3, df = 2, idf = ln(1 + 1.5 / 2.5) = ln 1.6 = 0.470004
    # d0: 1 / (1 + 1.2 * (0.5 + 0.5 * 0.75)) = 1 / 2.05 -> bm25 = 0.229270
    # d1: 1 / (1 + 1.2 * (0.5 + 0.5 * 1.5)) = 1 / 2.5  -> bm25 = 0.188001
    # d2: 0
    # z(bm25): mean 0.139090, std 0.099786 -> (0.903727, 0.490151, -1.393878)
    # cosine with (0, 1): (0, 1, 0.8); mean 0.6, std 0.432049 -> (-1.388730, 0.925820, 0.462910)
    # fused = 1.5 z(bm25) + z(cos) -> (-0.033140, 1.661047, -1.627907)
    retriever = HybridRetriever(three_docs())
    ranked = retriever.rank("coffee", vec(0, 1), k=3)

    assert [m.memory_id for m in ranked] == [11, 10, 12]
    by_id = {m.memory_id: m for m in ranked}
    assert by_id[10].lexical == pytest.approx(math.log(1.6) / 2.05, abs=1e-5)
    assert by_id[11].lexical == pytest.approx(math.log(1.6) / 2.5, abs=1e-5)
    assert by_id[12].lexical == 0
    assert [by_id[i].lexical_z for i in (10, 11, 12)] == pytest.approx([0.903727, 0.490151, -1.393878], abs=1e-4)
    assert [by_id[i].cosine for i in (10, 11, 12)] == pytest.approx([0.0, 1.0, 0.8], abs=1e-6)
    assert [by_id[i].dense_z for i in (10, 11, 12)] == pytest.approx([-1.388730, 0.925820, 0.462910], abs=1e-5)
    assert [by_id[i].fused for i in (10, 11, 12)] == pytest.approx([-0.033140, 1.661047, -1.627907], abs=1e-4)


def test_weights_change_the_ranking():
    # Lexical only: d0 (0.229) beats d1 (0.188). Dense only: d1 (cos 1) beats d2 (0.8) beats d0.
    lexical_only = HybridRetriever(three_docs(), FusionWeights(lexical=1.0, dense=0.0))
    dense_only = HybridRetriever(three_docs(), FusionWeights(lexical=0.0, dense=1.0))
    assert [m.memory_id for m in lexical_only.rank("coffee", vec(0, 1), k=3)] == [10, 11, 12]
    assert [m.memory_id for m in dense_only.rank("coffee", vec(0, 1), k=3)] == [11, 12, 10]


def test_neighbours_make_a_short_answer_findable():
    # The answer "every Sunday" shares no word with the query; the question before it does.
    docs = [
        RetrievalDoc(1, "every Sunday", "how often do you go hiking", vec(1, 0)),
        RetrievalDoc(2, "I bought new shoes", "", vec(1, 0)),
    ]
    ranked = HybridRetriever(docs).rank("hiking schedule", vec(1, 0), k=2)
    assert ranked[0].memory_id == 1 and ranked[0].lexical > 0 and ranked[1].lexical == 0


def test_query_without_lexical_terms_falls_back_to_the_dense_score():
    # Only stop words: BM25 is 0 everywhere, its z-score 0, so fused = z(cosine) exactly.
    # cosine with (1, 0): (1, 0, 0.6); mean 0.533333, std 0.410961 -> z (1.135550, -1.297771, 0.162221)
    ranked = HybridRetriever(three_docs()).rank("what about the and", vec(1, 0), k=3)
    assert [m.memory_id for m in ranked] == [10, 12, 11]
    assert all(m.lexical == 0 and m.lexical_z == 0 for m in ranked)
    assert [m.fused for m in ranked] == pytest.approx([1.135550, 0.162221, -1.297771], abs=1e-5)


def test_words_absent_from_the_index_score_nothing():
    ranked = HybridRetriever(three_docs()).rank("volcano", vec(1, 0), k=1)
    assert ranked[0].memory_id == 10 and ranked[0].lexical == 0


def test_zero_variance_gives_zero_z_scores_and_index_order():
    same = [RetrievalDoc(i, "coffee", "", vec(1, 1)) for i in (5, 6, 7)]
    ranked = HybridRetriever(same).rank("coffee", vec(1, 1), k=3)
    assert [m.memory_id for m in ranked] == [5, 6, 7]
    assert all(m.fused == 0 and m.lexical_z == 0 and m.dense_z == 0 for m in ranked)
    assert all(m.lexical > 0 for m in ranked)


def test_empty_index_and_non_positive_k():
    assert HybridRetriever([]).rank("coffee", vec(1, 0)) == []
    assert len(HybridRetriever([])) == 0
    assert HybridRetriever(three_docs()).rank("coffee", vec(1, 0), k=0) == []


def test_memories_without_any_content_word():
    docs = [RetrievalDoc(1, "ok", "", vec(1, 0)), RetrievalDoc(2, "yes", "", vec(0, 1))]
    ranked = HybridRetriever(docs).rank("coffee", vec(0, 1), k=2)
    assert [m.memory_id for m in ranked] == [2, 1]


def test_k_larger_than_the_index_returns_everything():
    assert len(HybridRetriever(three_docs()).rank("coffee", vec(0, 1), k=50)) == 3


def test_chinese_is_segmented_with_jieba():
    # Whitespace splitting would make each sentence a single token and nothing would match.
    docs = [
        RetrievalDoc(1, "我每天早上都喝一杯咖啡", "", vec(1, 0)),
        RetrievalDoc(2, "周末我去爬山了", "", vec(1, 0)),
        RetrievalDoc(3, "我的猫叫小橘", "", vec(1, 0)),
    ]
    ranked = HybridRetriever(docs).rank("你还记得我喝什么咖啡吗", vec(1, 0), k=3)
    assert ranked[0].memory_id == 1 and ranked[0].lexical > 0
    assert all(m.lexical == 0 for m in ranked[1:])


def test_query_vector_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="dimensions"):
        HybridRetriever(three_docs()).rank("coffee", np.ones(3, dtype=np.float32))


def test_zscore_and_top_k_helpers():
    assert zscore(np.array([1.0, 2.0, 3.0])) == pytest.approx([-1.224745, 0.0, 1.224745], abs=1e-6)
    assert zscore(np.array([4.0, 4.0])).tolist() == [0.0, 0.0]
    assert zscore(np.array([])).size == 0
    values = np.array([0.5, 2.0, 2.0, 1.0, 2.0])
    assert top_k(values, 2).tolist() == [1, 2]  # ties at the cut-off: lower index first
    assert top_k(values, 10).tolist() == [1, 2, 4, 3, 0]


def test_index_text_helpers():
    assert exchange_text("I like tea", "Noted!", task="T1", day=2) == "[T1, day 2] I like tea\nNoted!"
    assert exchange_text("I like tea", None) == "I like tea"
    assert neighbour_text(["a", "b", "c"], window=2) == "b\nc"
    assert neighbour_text(["a"], window=0) == ""


def test_index_tokens_are_those_of_the_whole_text_though_each_line_is_tokenized_once():
    from services.recall.retrieval import _tokenize_docs
    from services.text.keywords import tokenize

    turns = ["我家养了一只橘猫，[叫]年糕。\nIt's 3 years old, the cats' favourite!",
             "well-known café\n2.5 km, 周末跑步", "年糕不爱吃东西\nI'm worried"]
    docs = [RetrievalDoc(i, exchange_text(*t.split("\n"), "T1", 0), neighbour_text(turns[:i]), np.ones(2))
            for i, t in enumerate(turns)]
    assert _tokenize_docs(docs) == [tokenize(f"{d.text}\n{d.neighbours}") for d in docs]
    assert all(_tokenize_docs(docs))


def test_posting_sums_equal_bm25s_bit_for_bit_also_for_frequent_and_repeated_terms():
    """PostingSums adds the posting lists of terms in at least a quarter of the memories as dense rows; the
    float32 sums must still be exactly bm25s's, whatever the mix of frequent, rare and repeated terms."""
    import bm25s

    from services.recall.retrieval import PostingSums

    rng = np.random.default_rng(11)
    # "w" in every memory, "half" in about half, "quarter" in exactly a quarter, the rest rare
    corpus = [["w"] * int(rng.integers(1, 4)) + (["half"] if rng.random() < 0.5 else [])
              + (["quarter"] if i % 4 == 0 else []) + [f"t{t}" for t in rng.integers(0, 300, size=12)]
              for i in range(400)]
    index = bm25s.BM25(k1=1.2, b=0.5, method="lucene")
    index.index(corpus, show_progress=False)
    sums = PostingSums(index)
    vocabulary = np.arange(len(index.scores["indptr"]) - 1)  # term ids with a posting list
    queries = [[index.vocab_dict[t] for t in ("w", "t1", "w", "half", "w", "quarter", "t2")]]
    queries += [list(rng.choice(vocabulary, size=int(rng.integers(1, 15)))) for _ in range(200)]
    for ids in queries + queries[:1]:  # the first again: its dense rows are now cached
        expected = index.get_scores_from_ids(ids)
        got = sums.scores(ids)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert {index.vocab_dict[t] for t in ("w", "half", "quarter")} <= set(sums._dense)
    with pytest.raises(ValueError, match="non-occurrence"):
        variant = bm25s.BM25(method="bm25+")
        variant.index(corpus, show_progress=False)
        PostingSums(variant)


def test_zscore_and_top_k_are_exactly_the_plain_formulas():
    """The faster zscore (centred once) and top_k (exact k-th among the values above a sample's k-th) give
    the plain formulas' results bit for bit, ties included."""
    def plain_top_k(values, k):
        n = values.shape[0]
        if k >= n:
            candidates = np.arange(n)
        else:
            kth = np.partition(values, n - k)[n - k]
            candidates = np.flatnonzero(values >= kth)
        return candidates[np.lexsort((candidates, -values[candidates]))][:k]

    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 3000))
        values = rng.normal(size=n) * rng.uniform(0.01, 100)
        if trial % 3 == 0:  # many ties, also at the k-th place
            values = np.round(values, 0)
        expected = (values - values.mean()) / values.std() if values.std() >= 1e-12 else np.zeros(n)
        assert np.array_equal(zscore(values), expected)
        for k in (1, 5, 6, 17, n - 1, n, n + 3):
            if k > 0:
                assert np.array_equal(top_k(values, k), plain_top_k(values, k)), (n, k)
    assert np.array_equal(zscore(np.full(50, 0.3)), np.zeros(50))
