"""Retrieval benchmark of the memory components on LoCoMo: pure logic, no Flask, no database.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024) gives ten long two-person conversations split into dated
sessions and, per conversation, QA items whose ``evidence`` names the dialog
turns (``D<session>:<turn>``) that answer them. For every QA item a method
scores every turn of that item's conversation against the question; the
benchmark reports evidence recall@k, the share of the item's evidence turns
among the k best-scored turns, averaged over items, overall and per category.

Methods, each a turns-by-questions score matrix plus a tie-break:

* ``bm25`` - BM25 (Okapi) over the turns, tokenised with ``services.text.keywords``.
* ``dense`` - cosine between the offline embedder's query and passage vectors.
* ``fused`` - the deployed hybrid retriever (``services.recall.retrieval``): weighted sum of the
  z-scored BM25 (over the turn plus its previous turns in the same session) and the z-scored cosine.
* ``l4`` - the L4 forgetting-curve ``p_final`` (``services.recall.formulas``) used as
  the ranking score over the dense cosines, with ``t`` the time from the turn's
  session to the question (asked at the last session) and ``g`` the never-recalled
  ``g0`` from the turn's lexicon salience; ties (for instance every turn whose
  rescaled relevance is clipped to 1 and that is equally old) go to the higher cosine.
* ``l4_t0`` - ablation: the same curve with ``t = 0`` for every turn, so relevance mapping and
  salience bonus act without the time decay; ``l4`` against ``l4_t0`` is what the decay does.
* ``s1`` - S1's fuzzy score: keyword Jaccard, rescaled cosine and the 24-hour time
  weight, with the weights the study configures.

MemoryBank (Zhong et al., AAAI 2024) has probing questions but no gold answers:
``load_labelled_evidence`` reads evidence labelled by someone (each exchange, the user's message
and the reply, is one memory) and ``evaluate_labelled`` scores recall@k on them; without labels
``describe_memorybank`` only reports which stored days the methods retrieve. What the conditions
themselves hand the model is measured by ``services.research.memory_bench_deployed``.
The data are read where they lie (``../shared/bench``) and never copied.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from services.recall.formulas import RelevanceMapping, elapsed_time, final_probability, initial_g, recall_probability
from services.recall.parameters import RecallParams
from services.recall.retrieval import FusionWeights, HybridRetriever, RetrievalDoc, Scores, neighbour_text
from services.recall.salience import lexicon_scores
from services.text.keywords import keyword_jaccard, keyword_set, tokenize
from services.text.languages import detect

LOCOMO_FILE = Path("locomo") / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEV_CONVERSATIONS = tuple(range(0, 5))
METHODS = ("bm25", "dense", "fused", "l4", "l4_t0", "s1")
EMBEDDING_METHODS = frozenset({"dense", "fused", "l4", "l4_t0", "s1"})
DEFAULT_KS = (5, 10, 25)

# LoCoMo paper, Table 3: DRAGON retriever over dialog turns, all ten conversations, in percent.
DRAGON_REFERENCE: dict[int, dict[str, float]] = {
    5: {"overall": 56.7, "single-hop": 68.0, "multi-hop": 35.4, "temporal": 70.4, "open-domain": 33.1,
        "adversarial": 43.9},
    10: {"overall": 66.2},
    25: {"overall": 76.7},
}

SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
SECONDS_PER_DAY = 86400.0
_SESSION_KEY = re.compile(r"session_(\d+)")
# One evidence id, tolerating the stray colon of 'D:11:26' and the zero padding of 'D30:05'.
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
# Several ids in one string are joined by ';', ',' or whitespace ('D8:6; D9:17', 'D9:1 D4:4').
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    when: datetime  # the session's date: LoCoMo dates sessions, not turns
    caption: str | None = None  # LoCoMo replaces a shared image by its BLIP caption

    def passage(self) -> str:
        """What is indexed: who said it, what was said and, for a shared photo, its caption."""
        shared = f" [shares {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{shared}"


@dataclass(frozen=True)
class QAItem:
    conversation: int
    index: int  # position in the conversation's ``qa`` list
    question: str
    category: int
    evidence: tuple[str, ...]  # normalised ids that name turns of the conversation


@dataclass
class Conversation:
    index: int
    sample_id: str
    turns: list[Turn]
    questions: list[QAItem]

    @property
    def question_time(self) -> datetime:
        """The questions are put after the conversation: at its last session's date."""
        return max(t.when for t in self.turns)


@dataclass
class EvidenceReport:
    """What normalisation repaired and what it could not use, with the raw strings."""

    items: int = 0
    repaired: list[tuple[int, int, str, tuple[str, ...]]] = field(default_factory=list)
    duplicate_ids: list[tuple[int, int, str]] = field(default_factory=list)
    unparseable: list[tuple[int, int, str]] = field(default_factory=list)
    unresolvable: list[tuple[int, int, str]] = field(default_factory=list)
    empty_items: list[tuple[int, int, str]] = field(default_factory=list)
    dropped_items: list[tuple[int, int, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        kept = self.items - len(self.empty_items) - len(self.dropped_items)
        out = [f"QA items: {self.items} read, {kept} evaluated, "
               f"{len(self.empty_items) + len(self.dropped_items)} dropped"]
        out.append(f"  dropped, evidence list empty in the data: {len(self.empty_items)}")
        out += [f"    conv {c} qa {i}: {q!r}" for c, i, q in self.empty_items]
        out.append(f"  dropped, no usable evidence id left: {len(self.dropped_items)}")
        out += [f"    conv {c} qa {i}: {q!r}" for c, i, q in self.dropped_items]
        out.append(f"  evidence strings repaired: {len(self.repaired)}")
        out += [f"    conv {c} qa {i}: {raw!r} -> {list(ids)}" for c, i, raw, ids in self.repaired]
        out.append(f"  evidence fragments not an id (dropped): {len(self.unparseable)}")
        out += [f"    conv {c} qa {i}: {raw!r}" for c, i, raw in self.unparseable]
        out.append(f"  evidence ids naming no turn of the conversation (dropped): {len(self.unresolvable)}")
        out += [f"    conv {c} qa {i}: {raw!r}" for c, i, raw in self.unresolvable]
        out.append(f"  duplicate evidence ids merged: {len(self.duplicate_ids)}")
        out += [f"    conv {c} qa {i}: {raw!r}" for c, i, raw in self.duplicate_ids]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "repaired": [{"conversation": c, "qa": i, "raw": raw, "ids": list(ids)}
                         for c, i, raw, ids in self.repaired],
            **{name: [{"conversation": c, "qa": i, "value": v} for c, i, v in getattr(self, name)]
               for name in ("duplicate_ids", "unparseable", "unresolvable", "empty_items", "dropped_items")},
        }


def normalise_evidence(raw: str) -> tuple[list[str], list[str]]:
    """Canonical turn ids in one evidence string, and the fragments that are no id.

    ``'D8:6; D9:17'`` → (['D8:6', 'D9:17'], []); ``'D:11:26'`` → (['D11:26'], []);
    ``'D30:05'`` → (['D30:5'], []); ``'D'`` → ([], ['D'])."""
    ids: list[str] = []
    bad: list[str] = []
    for fragment in _EVIDENCE_SEPARATORS.split(raw.strip()):
        if not fragment:
            continue
        match = _EVIDENCE_ID.fullmatch(fragment)
        if match:
            ids.append(f"D{int(match.group(1))}:{int(match.group(2))}")
        else:
            bad.append(fragment)
    return ids, bad


def parse_session_date(text: str) -> datetime:
    """LoCoMo's session stamp, e.g. '1:56 pm on 8 May, 2023'."""
    return datetime.strptime(text.strip(), SESSION_DATE_FORMAT)


def build_conversation(index: int, sample: Mapping[str, Any], report: EvidenceReport) -> Conversation:
    """One LoCoMo sample as turns in order and QA items with resolved evidence; ``report`` collects
    what was repaired or dropped."""
    dialogue = sample["conversation"]
    sessions = sorted(int(m.group(1)) for key in dialogue if (m := _SESSION_KEY.fullmatch(key)))
    turns: list[Turn] = []
    for number in sessions:
        # Some samples carry dates of sessions that hold no turns; only sessions with turns count.
        when = parse_session_date(dialogue[f"session_{number}_date_time"])
        for raw in dialogue[f"session_{number}"]:
            turns.append(Turn(dia_id=raw["dia_id"], session=number, speaker=raw["speaker"], text=raw["text"],
                              when=when, caption=raw.get("blip_caption")))
    known = {t.dia_id for t in turns}
    questions: list[QAItem] = []
    for qa_index, qa in enumerate(sample["qa"]):
        report.items += 1
        evidence_strings = list(qa.get("evidence") or [])
        if not evidence_strings:
            report.empty_items.append((index, qa_index, qa["question"]))
            continue
        resolved: list[str] = []
        for raw in evidence_strings:
            ids, bad = normalise_evidence(raw)
            if ids and ids != [raw]:
                report.repaired.append((index, qa_index, raw, tuple(ids)))
            report.unparseable.extend((index, qa_index, b) for b in bad)
            for dia_id in ids:
                if dia_id not in known:
                    report.unresolvable.append((index, qa_index, dia_id))
                elif dia_id in resolved:
                    report.duplicate_ids.append((index, qa_index, dia_id))
                else:
                    resolved.append(dia_id)
        if not resolved:
            report.dropped_items.append((index, qa_index, qa["question"]))
            continue
        questions.append(QAItem(conversation=index, index=qa_index, question=qa["question"],
                                category=int(qa["category"]), evidence=tuple(resolved)))
    return Conversation(index=index, sample_id=str(sample.get("sample_id", index)), turns=turns,
                        questions=questions)


def load_locomo(data_dir: Path, conversations: Iterable[int]) -> tuple[list[Conversation], EvidenceReport]:
    """The chosen conversations of ``<data_dir>/locomo/locomo10.json`` and the evidence report."""
    with open(Path(data_dir) / LOCOMO_FILE, encoding="utf-8") as handle:
        samples = json.load(handle)
    report = EvidenceReport()
    chosen = sorted(set(conversations))
    missing = [i for i in chosen if not 0 <= i < len(samples)]
    if missing:
        raise ValueError(f"conversations {missing} not in the data (it has 0-{len(samples) - 1})")
    return [build_conversation(i, samples[i], report) for i in chosen], report


def parse_index_ranges(spec: str) -> list[int]:
    """'0-4', '0,2,5-9' → sorted distinct integers."""
    values: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = (int(x) for x in part.split("-", 1))
            if low > high:
                raise ValueError(f"empty range {part!r}")
            values.update(range(low, high + 1))
        else:
            values.add(int(part))
    if not values:
        raise ValueError(f"no indices in {spec!r}")
    return sorted(values)


def split_of(conversation: int) -> str:
    return "dev" if conversation in DEV_CONVERSATIONS else "held-out"


# ---------------------------------------------------------------------------
# Metric
# ---------------------------------------------------------------------------


def rank_turns(primary: np.ndarray, secondary: np.ndarray | None = None) -> np.ndarray:
    """Turn indices best first by ``primary``, then ``secondary`` (both descending), then turn order."""
    primary = np.asarray(primary, dtype=np.float64)
    keys: list[np.ndarray] = [np.arange(primary.size)]
    if secondary is not None:
        keys.append(-np.asarray(secondary, dtype=np.float64))
    keys.append(-primary)
    return np.lexsort(keys)


def evidence_recall(ranked_ids: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """Share of the evidence turns among the first ``k`` ranked turns."""
    wanted = set(evidence)
    if not wanted:
        raise ValueError("evidence recall is undefined without evidence")
    return len(wanted.intersection(ranked_ids[:k])) / len(wanted)


@dataclass(frozen=True)
class ItemResult:
    method: str
    conversation: int
    qa: int
    category: int
    recall: dict[int, float]


def summarise(results: Sequence[ItemResult], ks: Sequence[int]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """split → method → group ('overall' or a category name) → {'n': items, 'recall@k': mean percent}."""
    table: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    buckets: dict[tuple[str, str, str], list[ItemResult]] = {}
    for item in results:
        for split in (split_of(item.conversation), "all"):
            for group in ("overall", CATEGORIES.get(item.category, f"category {item.category}")):
                buckets.setdefault((split, item.method, group), []).append(item)
    for (split, method, group), items in buckets.items():
        row: dict[str, Any] = {"n": len(items)}
        for k in ks:
            row[f"recall@{k}"] = 100.0 * float(np.mean([i.recall[k] for i in items]))
        table.setdefault(split, {}).setdefault(method, {})[group] = row
    return table


# ---------------------------------------------------------------------------
# Methods
# ---------------------------------------------------------------------------


def bm25_scores(turn_texts: Sequence[str], questions: Sequence[str]) -> np.ndarray:
    """questions × turns BM25 (Okapi) scores over content words (stop words dropped, Chinese segmented)."""
    corpus = [tokenize(text) for text in turn_texts]
    if not questions or not any(corpus):
        return np.zeros((len(questions), len(turn_texts)))
    index = BM25Okapi(corpus)
    return np.vstack([index.get_scores(tokenize(q)) for q in questions])


def turn_ages_days(turns: Sequence[Turn], asked_at: datetime) -> np.ndarray:
    """Days from each turn's session to the moment the question is asked (never negative)."""
    return np.array([max((asked_at - t.when).total_seconds(), 0.0) / SECONDS_PER_DAY for t in turns])


def turn_salience(texts: Iterable[str], weights: Mapping[str, float] | None = None) -> np.ndarray:
    """Offline lexicon salience of each turn, as the offline consolidation would store it."""
    return np.array([lexicon_scores(text).salience(weights) for text in texts], dtype=np.float64)


def l4_elapsed(ages_days: np.ndarray, params: RecallParams) -> np.ndarray:
    """``t`` of each turn in the preset's unit: age in days (or hours) × time_scale, or, for the
    ``turns`` unit, the number of later turns in the conversation."""
    ages = np.asarray(ages_days, dtype=np.float64)
    if params.time_unit == "turns":
        later = np.arange(ages.size - 1, -1, -1, dtype=np.float64)
        return np.asarray(elapsed_time(0.0, unit="turns", time_scale=params.time_scale,
                                       day_seconds=SECONDS_PER_DAY, turns=later))
    return np.asarray(elapsed_time(ages * SECONDS_PER_DAY, unit=params.time_unit,
                                   time_scale=params.time_scale, day_seconds=SECONDS_PER_DAY))


def l4_scores(cosines: np.ndarray, t: np.ndarray, salience: np.ndarray, params: RecallParams,
              languages: Sequence[str | None], retrieval: Sequence[Scores] | None = None) -> np.ndarray:
    """questions × turns ``p_final`` of the forgetting curve for memories never recalled before:
    ``r`` from the preset's relevance mapping (a calibrated ``logistic`` one reads the hybrid
    retriever's per-question ``retrieval`` scores), ``t`` per turn, ``g = g0`` from the turn's salience."""
    g = np.asarray(initial_g(salience, params.g0_base, params.g0_salience), dtype=np.float64)
    out = np.empty_like(cosines, dtype=np.float64)
    for row, language in enumerate(languages):
        extra = None if retrieval is None else {"fused": retrieval[row].fused, "lexical_z": retrieval[row].lexical_z,
                                                "dense_z": retrieval[row].dense_z}
        r = params.relevance.to_r(cosines[row], language, scores=extra)
        p = recall_probability(r, t, g)
        out[row] = final_probability(p, salience, params.salience_bonus)
    return out


@dataclass(frozen=True)
class FuzzyScoring:
    """S1's fuzzy-recall pieces, taken from the study's S1 settings by the caller
    (``services.memory.structured_summary`` holds them; this module stays free of the database)."""

    weights: Mapping[str, float]
    semantic: RelevanceMapping
    time_weight: Callable[[float], float]
    threshold: float
    max_fragments: int
    candidate_pool: int | None = None  # S1 scores only the retriever's best this many (None: all)


def fast_keyword_jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``keywords.keyword_jaccard`` with a set intersection when neither side holds Chinese words
    (where it reduces to plain Jaccard); the benchmark scores about a million pairs."""
    if not a or not b:
        return 0.0
    if _CJK.search("".join(a)) or _CJK.search("".join(b)):
        return keyword_jaccard(a, b)
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


def s1_scores(cosines: np.ndarray, turn_texts: Sequence[str], questions: Sequence[str], ages_days: np.ndarray,
              scoring: FuzzyScoring, languages: Sequence[str | None]) -> np.ndarray:
    """questions × turns ``0.4·keyword Jaccard + 0.4·semantic + 0.2·time weight`` (study weights)."""
    turn_keywords = [keyword_set(t) for t in turn_texts]
    time_w = np.array([scoring.time_weight(24.0 * float(age)) for age in ages_days])
    w = scoring.weights
    out = np.empty_like(cosines, dtype=np.float64)
    for row, (question, language) in enumerate(zip(questions, languages, strict=True)):
        q_keywords = keyword_set(question)
        jaccard = np.array([fast_keyword_jaccard(q_keywords, kw) for kw in turn_keywords])
        semantic = np.asarray(scoring.semantic.to_r(cosines[row], language), dtype=np.float64)
        out[row] = w["keyword"] * jaccard + w["semantic"] * semantic + w["time"] * time_w
    return out


# ---------------------------------------------------------------------------
# Embedding cache
# ---------------------------------------------------------------------------


def text_key(model: str, kind: str, text: str) -> str:
    """Cache key of one vector: the model, query or passage, and the text."""
    return hashlib.sha256(f"{model}\x00{kind}\x00{text}".encode()).hexdigest()


class EmbeddingCache:
    """Vectors on disk under ``directory``, one file per model and kind (query / passage), keyed by
    ``text_key``. Missing vectors are embedded in batches and saved as they come, so an interrupted
    run keeps what it computed."""

    def __init__(self, directory: Path, embedder: Any, batch_size: int = 32, save_every: int = 256,
                 progress: Callable[[str], None] | None = None) -> None:
        self.directory = Path(directory)
        self.embedder = embedder
        self.batch_size = batch_size
        self.save_every = save_every
        self.progress = progress
        self._stores: dict[str, dict[str, np.ndarray]] = {}
        self.hits = 0
        self.computed = 0
        self.seconds = 0.0

    def _path(self, kind: str) -> Path:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.embedder.model)
        return self.directory / f"{slug}.{kind}.npz"

    def _store(self, kind: str) -> dict[str, np.ndarray]:
        if kind not in self._stores:
            store: dict[str, np.ndarray] = {}
            path = self._path(kind)
            if path.exists():
                with np.load(path) as saved:
                    store = dict(zip(saved["keys"].tolist(), saved["vectors"], strict=True))
            self._stores[kind] = store
        return self._stores[kind]

    def _save(self, kind: str) -> None:
        store = self._stores[kind]
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(kind)
        partial = path.with_name(path.name + ".partial.npz")
        np.savez(partial, keys=np.array(list(store), dtype="U64"),
                 vectors=np.vstack(list(store.values())).astype(np.float32))
        partial.replace(path)

    def embed(self, texts: Sequence[str], kind: str) -> np.ndarray:
        """Vectors of ``texts`` (``kind`` 'query' or 'passage'), computing only those not cached."""
        if kind not in ("query", "passage"):
            raise ValueError("kind must be 'query' or 'passage'")
        store = self._store(kind)
        keys = [text_key(self.embedder.model, kind, t) for t in texts]
        todo = list(dict.fromkeys(k for k in keys if k not in store))
        self.hits += len(keys) - len(todo)
        if todo:
            by_key = dict(zip(keys, texts, strict=True))
            encode = self.embedder.embed_queries if kind == "query" else self.embedder.embed_passages
            started = time.perf_counter()
            unsaved = 0
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start:start + self.batch_size]
                vectors = encode([by_key[k] for k in batch])
                store.update(zip(batch, np.asarray(vectors, dtype=np.float32), strict=True))
                unsaved += len(batch)
                done = start + len(batch)
                if unsaved >= self.save_every or done == len(todo):
                    self._save(kind)
                    unsaved = 0
                if self.progress:
                    elapsed = time.perf_counter() - started
                    self.progress(f"embedded {done}/{len(todo)} {kind} texts, "
                                  f"{done / elapsed:.1f}/s, {elapsed:.0f} s")
            elapsed = time.perf_counter() - started
            self.seconds += elapsed
            self.computed += len(todo)
        return np.vstack([store[k] for k in keys]) if keys else np.zeros((0, self.embedder.dim), np.float32)


# ---------------------------------------------------------------------------
# Running the benchmark
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FusionSettings:
    """The fused ranker's knobs: the weights, how many previous turns of the same session are
    indexed lexically with a turn (``window``), and BM25's k1 and b."""

    weights: FusionWeights = FusionWeights()
    window: int = 2
    k1: float = 1.2
    b: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        return {"lexical_weight": self.weights.lexical, "dense_weight": self.weights.dense, "window": self.window,
                "k1": self.k1, "b": self.b}


def session_neighbours(texts: Sequence[str], sessions: Sequence[Any], window: int) -> list[str]:
    """For each text, the ``window`` texts before it in the same session (``sessions[i]`` names it)."""
    out: list[str] = []
    for i, session in enumerate(sessions):
        start = i
        while start > 0 and i - start < window and sessions[start - 1] == session:
            start -= 1
        out.append(neighbour_text(list(texts[start:i]), window))
    return out


def retrieval_scores(texts: Sequence[str], neighbours: Sequence[str], turn_vectors: np.ndarray,
                     questions: Sequence[str], query_vectors: np.ndarray, fusion: FusionSettings) -> list[Scores]:
    """Per question, every turn's scores from ``services.recall.retrieval.HybridRetriever``."""
    docs = [RetrievalDoc(i, text, neighbour, vector)
            for i, (text, neighbour, vector) in enumerate(zip(texts, neighbours, turn_vectors, strict=True))]
    retriever = HybridRetriever(docs, fusion.weights, k1=fusion.k1, b=fusion.b)
    return [retriever.scores(q, v) for q, v in zip(questions, query_vectors, strict=True)]


def fused_scores(texts: Sequence[str], neighbours: Sequence[str], turn_vectors: np.ndarray, questions: Sequence[str],
                 query_vectors: np.ndarray, fusion: FusionSettings) -> np.ndarray:
    """questions × turns fused scores of ``services.recall.retrieval.HybridRetriever``."""
    scores = retrieval_scores(texts, neighbours, turn_vectors, questions, query_vectors, fusion)
    return np.vstack([s.fused for s in scores]) if texts else np.zeros((len(questions), 0))


@dataclass
class BenchContext:
    """What the methods need besides the data: the embedding cache for every method but bm25, the
    recall parameters for l4 and l4_t0, the fuzzy-recall settings for s1, the fused ranker's
    settings. Collects timings and the evidence turns' ages across conversations."""

    methods: Sequence[str]
    ks: Sequence[int]
    cache: EmbeddingCache | None = None
    recall_params: RecallParams | None = None
    fuzzy: FuzzyScoring | None = None
    salience_weights: Mapping[str, float] | None = None
    fusion: FusionSettings = FusionSettings()
    timings: Counter = field(default_factory=Counter)
    evidence_ages: list[float] = field(default_factory=list)  # days before the question, per evidence turn


@dataclass
class Scored:
    """Every chosen method's questions × turns scores: the ranking key and its tie-break."""

    rankings: dict[str, tuple[np.ndarray, np.ndarray | None]] = field(default_factory=dict)
    cosines: np.ndarray | None = None

    def order(self, method: str, row: int) -> np.ndarray:
        primary, secondary = self.rankings[method]
        return rank_turns(primary[row], None if secondary is None else secondary[row])


@contextmanager
def _timed(ctx: BenchContext, name: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    ctx.timings[name] += time.perf_counter() - started


def score_methods(texts: Sequence[str], questions: Sequence[str], ages_days: np.ndarray,
                  ctx: BenchContext, sessions: Sequence[Any] | None = None) -> Scored:
    """Score every turn text against every question with each method of ``ctx``; times each method.
    ``sessions`` names each turn's session (the fused ranker indexes a turn with its previous turns
    of the same session); without it every turn is its own session."""
    unknown = set(ctx.methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; known: {', '.join(METHODS)}")
    scored = Scored()
    if "bm25" in ctx.methods:
        with _timed(ctx, "bm25"):
            scored.rankings["bm25"] = (bm25_scores(texts, questions), None)
    if EMBEDDING_METHODS & set(ctx.methods):
        _score_embedded(scored, texts, questions, ages_days, ctx,
                        sessions if sessions is not None else range(len(texts)))
    return scored


def _score_embedded(scored: Scored, texts: Sequence[str], questions: Sequence[str], ages_days: np.ndarray,
                    ctx: BenchContext, sessions: Sequence[Any]) -> None:
    """The methods that need the embedder: dense, fused, the L4 curve and S1's fuzzy score."""
    if ctx.cache is None:
        raise ValueError(f"{', '.join(sorted(EMBEDDING_METHODS))} need an embedding cache")
    with _timed(ctx, "embedding"):
        turn_vectors = ctx.cache.embed(texts, "passage")
        query_vectors = ctx.cache.embed(questions, "query")
        cosines = query_vectors.astype(np.float64) @ turn_vectors.astype(np.float64).T
    scored.cosines = cosines
    if "dense" in ctx.methods:
        scored.rankings["dense"] = (cosines, None)
    retrieval = None
    if {"fused", "l4", "l4_t0", "s1"} & set(ctx.methods):
        with _timed(ctx, "fused"):
            neighbours = session_neighbours(texts, sessions, ctx.fusion.window)
            retrieval = retrieval_scores(texts, neighbours, turn_vectors, questions, query_vectors, ctx.fusion)
    if "fused" in ctx.methods:
        scored.rankings["fused"] = (np.vstack([s.fused for s in retrieval]) if texts else cosines, None)
    languages = [detect(q) for q in questions]
    if {"l4", "l4_t0"} & set(ctx.methods):
        with _timed(ctx, "l4"):
            _score_curve(scored, texts, ages_days, ctx, languages, retrieval)
    if "s1" in ctx.methods:
        if ctx.fuzzy is None:
            raise ValueError("s1 needs the study's fuzzy-recall settings")
        with _timed(ctx, "s1"):
            fuzzy = s1_scores(cosines, texts, questions, ages_days, ctx.fuzzy, languages)
            scored.rankings["s1"] = (fuzzy + _pool_bonus(retrieval, ctx.fuzzy.candidate_pool, fuzzy.shape), cosines)


def _pool_bonus(retrieval: Sequence[Scores] | None, pool: int | None, shape: tuple[int, ...]) -> np.ndarray:
    """S1 scores only the hybrid retriever's best ``pool`` messages: lift those above every other
    (fuzzy scores lie in [0, 1]), so the ranking is S1's choice among its candidates, then the rest."""
    bonus = np.zeros(shape)
    if retrieval is None or not pool:
        return bonus
    for row, scores in enumerate(retrieval):
        bonus[row, np.argsort(-scores.fused, kind="stable")[:pool]] = 10.0
    return bonus


def _score_curve(scored: Scored, texts: Sequence[str], ages_days: np.ndarray, ctx: BenchContext,
                 languages: Sequence[str | None], retrieval: Sequence[Scores] | None) -> None:
    if ctx.recall_params is None:
        raise ValueError("l4 needs the study's recall parameters")
    params, cosines = ctx.recall_params, scored.cosines
    salience = turn_salience(texts, ctx.salience_weights)
    if "l4_t0" in ctx.methods:
        scored.rankings["l4_t0"] = (l4_scores(cosines, np.zeros(len(texts)), salience, params, languages,
                                              retrieval), cosines)
    if "l4" in ctx.methods:
        scored.rankings["l4"] = (l4_scores(cosines, l4_elapsed(ages_days, params), salience, params, languages,
                                           retrieval), cosines)


def evaluate_conversation(conv: Conversation, ctx: BenchContext, limit_qa: int | None = None) -> list[ItemResult]:
    """Recall@k of every method on every (or the first ``limit_qa``) evaluated QA item of ``conv``;
    also adds the evidence turns' ages to ``ctx``."""
    items = conv.questions[:limit_qa] if limit_qa is not None else conv.questions
    if not items:
        return []
    ids = [t.dia_id for t in conv.turns]
    ages = turn_ages_days(conv.turns, conv.question_time)
    position = {dia_id: i for i, dia_id in enumerate(ids)}
    ctx.evidence_ages.extend(float(ages[position[e]]) for item in items for e in item.evidence)
    scored = score_methods([t.passage() for t in conv.turns], [q.question for q in items], ages, ctx,
                           sessions=[t.session for t in conv.turns])
    max_k = max(ctx.ks)
    results: list[ItemResult] = []
    for method in (m for m in METHODS if m in scored.rankings):
        for row, item in enumerate(items):
            ranked = [ids[i] for i in scored.order(method, row)[:max_k]]
            results.append(ItemResult(method, conv.index, item.index, item.category,
                                      {k: evidence_recall(ranked, item.evidence, k) for k in ctx.ks}))
    return results


# ---------------------------------------------------------------------------
# MemoryBank: descriptive only (its probing questions have no gold answers)
# ---------------------------------------------------------------------------

MEMORYBANK_FILES = {
    "cn": (Path("memorybank") / "memory_bank_cn.json", Path("memorybank") / "probing_questions_cn.jsonl"),
    "en": (Path("memorybank") / "memory_bank_en.json", Path("memorybank") / "probing_questions_en.jsonl"),
}
MEMORYBANK_LANGUAGES = {"zh": "cn", "cn": "cn", "en": "en"}
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_ZH_DAY = re.compile(r"(\d{1,2})月(\d{1,2})[日号]")
_EN_DAY = re.compile(r"\b(" + "|".join(_MONTHS) + r")\s+(\d{1,2})(?:st|nd|rd|th)?\b", re.IGNORECASE)


@dataclass(frozen=True)
class Exchange:
    """One stored MemoryBank exchange; ``key`` is 'YYYY-MM-DD#j', j its 0-based position that day."""

    key: str
    query: str
    response: str
    when: datetime
    day_number: int


@dataclass
class MemoryBankUser:
    name: str
    exchanges: list[Exchange]
    questions: list[str]

    @property
    def memories(self) -> list[Turn]:
        """One memory per exchange (the user's message and the reply), as the rankers see it."""
        return [Turn(dia_id=e.key, session=e.day_number, speaker=self.name, text=f"{e.query} {e.response}".strip(),
                     when=e.when) for e in self.exchanges]

    @property
    def question_time(self) -> datetime:
        """The probing happens after the stored days: the day after the last one."""
        return max(e.when for e in self.exchanges) + timedelta(days=1)


def _mapping(value: Any) -> dict[str, Any]:
    # The English file stores most users' histories as the text of a Python dict literal, some as objects.
    if isinstance(value, str):
        value = ast.literal_eval(value) if value.strip() else {}
    return dict(value or {})


def _exchanges(history: Mapping[str, Any]) -> list[Exchange]:
    out: list[Exchange] = []
    for day_number, (day, exchanges) in enumerate(sorted(history.items()), start=1):
        when = datetime.fromisoformat(day).replace(hour=12)  # stored per day; the hour is unknown
        for j, exchange in enumerate(exchanges):
            out.append(Exchange(key=f"{day}#{j}", query=str(exchange.get("query", "") or "").strip(),
                                response=str(exchange.get("response", "") or "").strip(), when=when,
                                day_number=day_number))
    return out


def load_memorybank(data_dir: Path, language: str) -> tuple[list[MemoryBankUser], list[str]]:
    """Users with their stored exchanges and probing questions, and what could not be matched.
    ``language`` is 'cn'/'en' (the file suffix) or 'zh' (read as 'cn')."""
    memory_file, question_file = MEMORYBANK_FILES[MEMORYBANK_LANGUAGES.get(language, language)]
    with open(Path(data_dir) / memory_file, encoding="utf-8") as handle:
        stored = {name.strip(): user for name, user in json.load(handle).items()}
    questions: dict[str, list[str]] = {}
    with open(Path(data_dir) / question_file, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                for name, asked in json.loads(line).items():
                    questions.setdefault(name.strip(), []).extend(q.strip().strip('"') for q in asked)
    problems = [f"user {name!r} has probing questions but no stored history" for name in questions
                if name not in stored]
    users: list[MemoryBankUser] = []
    for name, user in stored.items():
        if name not in questions:
            problems.append(f"user {name!r} has no probing questions")
            continue
        exchanges = _exchanges(_mapping(user.get("history")))
        if exchanges:
            users.append(MemoryBankUser(name=name, exchanges=exchanges, questions=questions[name]))
        else:
            problems.append(f"user {name!r} has no stored exchanges")
    return users, problems


@dataclass(frozen=True)
class LabelledQuestion:
    """A MemoryBank probing question with labelled evidence exchanges ('YYYY-MM-DD#j')."""

    user: str
    qid: str
    index: int  # position in the user's list of probing questions
    question: str
    evidence: tuple[str, ...]


def _labelled(entry: Any, position: int, users: Mapping[str, MemoryBankUser]) -> LabelledQuestion:
    where = f"evidence entry {position}"
    if not isinstance(entry, Mapping) or not {"user", "qid", "evidence"} <= set(entry):
        raise ValueError(f"{where}: expected an object with user, qid and evidence")
    name = str(entry["user"]).strip()
    user = users.get(name)
    if user is None:
        raise ValueError(f"{where}: no MemoryBank user {name!r} (known: {', '.join(sorted(users))})")
    qid = str(entry["qid"])
    prefix, _, number = qid.rpartition("#")
    if prefix.strip() != name or not number.isdigit() or int(number) >= len(user.questions):
        raise ValueError(f"{where}: qid {qid!r} must be '{name}#<i>' with i below {len(user.questions)}")
    known = {e.key for e in user.exchanges}
    evidence: list[str] = []
    for item in entry["evidence"] or []:
        if not isinstance(item, Mapping) or "date" not in item or not isinstance(item.get("index"), int):
            raise ValueError(f"{where}: evidence items need a date and an integer index, got {item!r}")
        key = f"{item['date']}#{item['index']}"
        if key not in known:
            raise ValueError(f"{where}: {name} has no exchange {item['index']} on {item['date']}")
        if key not in evidence:
            evidence.append(key)
    if not evidence:
        raise ValueError(f"{where}: {qid} has no evidence")
    return LabelledQuestion(user=name, qid=qid, index=int(number), question=user.questions[int(number)],
                            evidence=tuple(evidence))


def load_labelled_evidence(path: Path, users: Sequence[MemoryBankUser]) -> list[LabelledQuestion]:
    """Labelled MemoryBank questions from a JSON list of ``{"user", "qid": "<user>#<i>", "evidence":
    [{"date", "index"}]}``; every reference is checked against the data, with a clear error."""
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of labelled questions")
    by_name = {u.name: u for u in users}
    labelled = [_labelled(entry, i, by_name) for i, entry in enumerate(entries)]
    seen: set[str] = set()
    for item in labelled:
        if item.qid in seen:
            raise ValueError(f"{path}: {item.qid} is labelled twice")
        seen.add(item.qid)
    return labelled


def evaluate_labelled(users: Sequence[MemoryBankUser], labelled: Sequence[LabelledQuestion],
                      ctx: BenchContext) -> list[ItemResult]:
    """Recall@k of every method on labelled MemoryBank questions; an exchange is one memory."""
    results: list[ItemResult] = []
    for number, user in enumerate(users):
        items = [q for q in labelled if q.user == user.name]
        if not items:
            continue
        memories = user.memories
        ids = [m.dia_id for m in memories]
        scored = score_methods([m.passage() for m in memories], [q.question for q in items],
                               turn_ages_days(memories, user.question_time), ctx,
                               sessions=[m.session for m in memories])
        for method in (m for m in METHODS if m in scored.rankings):
            for row, item in enumerate(items):
                ranked = [ids[i] for i in scored.order(method, row)[:max(ctx.ks)]]
                results.append(ItemResult(method, number, item.index, 0,
                                          {k: evidence_recall(ranked, item.evidence, k) for k in ctx.ks}))
    return results


def method_recalls(results: Sequence[ItemResult], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """method → {'recall@k': mean evidence recall as a fraction, 'n': items}."""
    out: dict[str, dict[str, float]] = {}
    for method in dict.fromkeys(r.method for r in results):
        mine = [r for r in results if r.method == method]
        out[method] = {**{f"recall@{k}": float(np.mean([r.recall[k] for r in mine])) for k in ks}, "n": len(mine)}
    return out


def question_day(question: str, year: int) -> date | None:
    """The calendar day a probing question names ('5月2日', '4月27号', 'May 2nd'), if any."""
    match = _ZH_DAY.search(question)
    if match:
        month, day = int(match.group(1)), int(match.group(2))
    else:
        match = _EN_DAY.search(question)
        if not match:
            return None
        month, day = _MONTHS.index(match.group(1).lower()) + 1, int(match.group(2))
    try:
        return date(year, month, day)
    except ValueError:
        return None


def describe_memorybank(users: Sequence[MemoryBankUser], ctx: BenchContext, top: int = 5) -> dict[str, Any]:
    """Which stored days each method's best ``top`` exchanges come from, per user and question.

    With no gold answers the only check is a proxy: for questions that name a day, how often a
    retrieved exchange was stored on that day (the stored text carries no dates, so a hit means
    the content matched)."""
    per_method: dict[str, dict[str, Any]] = {}
    per_user: list[dict[str, Any]] = []
    for user in users:
        days = [m.dia_id.split("#")[0] for m in user.memories]
        ages = turn_ages_days(user.memories, user.question_time)
        scored = score_methods([m.passage() for m in user.memories], user.questions, ages, ctx,
                               sessions=[m.session for m in user.memories])
        year = user.memories[0].when.year
        entry: dict[str, Any] = {"user": user.name, "exchanges": len(user.memories), "days": len(set(days)),
                                 "questions": [], "top1_days": {}}
        for row, question in enumerate(user.questions):
            named = question_day(question, year)
            asked: dict[str, Any] = {"question": question, "names_day": named.isoformat() if named else None}
            for method in (m for m in METHODS if m in scored.rankings):
                best_days = [days[i] for i in scored.order(method, row)[:top]]
                asked[method] = best_days
                stats = per_method.setdefault(method, {"questions": 0, "distinct_days": 0, "dated": 0,
                                                       "dated_hit@1": 0, "dated_hit@top": 0})
                stats["questions"] += 1
                stats["distinct_days"] += len(set(best_days))
                if named:
                    stats["dated"] += 1
                    stats["dated_hit@1"] += int(best_days[0] == named.isoformat())
                    stats["dated_hit@top"] += int(named.isoformat() in best_days)
                entry["top1_days"].setdefault(method, Counter())[best_days[0]] += 1
            entry["questions"].append(asked)
        entry["top1_days"] = {m: dict(sorted(c.items())) for m, c in entry["top1_days"].items()}
        per_user.append(entry)
    summary = {m: {"questions": st["questions"], "mean_distinct_days": st["distinct_days"] / max(st["questions"], 1),
                   "dated_questions": st["dated"],
                   "dated_hit@1_percent": 100.0 * st["dated_hit@1"] / max(st["dated"], 1),
                   f"dated_hit@{top}_percent": 100.0 * st["dated_hit@top"] / max(st["dated"], 1)}
               for m, st in per_method.items()}
    return {"top": top, "summary": summary, "users": per_user}


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------

SPLIT_TITLES = {"dev": "dev (conversations 0-4)", "held-out": "held-out (conversations 5-9)",
                "all": "all evaluated conversations"}


def format_tables(summary: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]], methods: Sequence[str],
                  ks: Sequence[int]) -> list[str]:
    """One markdown table per split: a row per method and k (then the DRAGON reference), columns
    overall and per category, evidence recall in percent; the header gives each group's item count."""
    groups = ["overall", *CATEGORIES.values()]
    lines: list[str] = []
    # "all" repeats a split when the run covers only one
    splits = ("dev", "held-out", "all") if {"dev", "held-out"} <= set(summary) else ("dev", "held-out")
    for split in splits:
        by_method = summary.get(split)
        if not by_method:
            continue
        counts = next(iter(by_method.values()))
        header = " | ".join(f"{g} (n={counts[g]['n'] if g in counts else 0})" for g in groups)
        lines += [f"{SPLIT_TITLES[split]}: evidence recall@k (%)", "", f"| method | k | {header} |",
                  "|" + " --- |" * (len(groups) + 2)]
        for method in (m for m in methods if m in by_method):
            for k in ks:
                cells = [f"{by_method[method][g][f'recall@{k}']:.1f}" if g in by_method[method] else "-"
                         for g in groups]
                lines.append(f"| {method} | {k} | " + " | ".join(cells) + " |")
        for k in ks:
            reference = DRAGON_REFERENCE.get(k)
            if reference:
                cells = [f"{reference[g]:.1f}" if g in reference else "" for g in groups]
                lines.append(f"| DRAGON (paper, conv 0-9) | {k} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def format_memorybank(report: Mapping[str, Any], language: str) -> list[str]:
    """Per method: spread of the retrieved days and the dated-question proxy; per user: the days the
    best exchange came from (day → questions), for each method."""
    top = report["top"]
    lines = [f"MemoryBank ({language}), descriptive: no gold answers", "",
             f"| method | questions | distinct days in top {top} (mean) | questions naming a day | "
             f"named day at rank 1 (%) | named day in top {top} (%) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for method, st in report["summary"].items():
        lines.append(f"| {method} | {st['questions']} | {st['mean_distinct_days']:.2f} | {st['dated_questions']} | "
                     f"{st['dated_hit@1_percent']:.1f} | {st[f'dated_hit@{top}_percent']:.1f} |")
    lines += ["", "Day of the best-ranked exchange per probing question (MM-DD×questions):"]
    for user in report["users"]:
        lines.append(f"  {user['user']} ({user['exchanges']} exchanges over {user['days']} days, "
                     f"{len(user['questions'])} questions)")
        for method, counts in user["top1_days"].items():
            spread = " ".join(f"{day[5:]}×{n}" for day, n in counts.items())
            lines.append(f"    {method:6} {spread}")
    return lines
