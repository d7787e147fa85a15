"""Recall maths: the hybrid retriever (BM25 + dense), L4's relevance index, the forgetting curve and the
emotional salience that slows it. Pure functions and small value types: no database, no Flask.

May import: ``services.platform``, ``services.text``, ``services.llm`` (the request types for salience scoring).

Public names:
- ``retrieval``: ``HybridRetriever``, ``RetrievalDoc``, ``ScoredMemory``;
- ``relevance``: ``LogisticRelevance``, ``UnrelatedTail``, the ``anchored`` map;
- ``formulas``: the forgetting curve, its consolidation update, salience, ``RelevanceMapping`` and ``elapsed_time``;
- ``candidates``: ``CandidateRule`` (which memories may be recalled) and ``recall_cue``;
- ``directed``: ``DirectedRetrieval`` (an explicit request to remember brings back its clear best match);
- ``rehearsal``: ``RehearsalRoute`` (a memory reached directly and through an exchange that recalled it);
- ``parameters``: ``RecallParams``, ``RetrievalSettings``, ``resolve_recall_params``;
- ``scoring``: the curve applied to a set of candidates (``score_candidates``, ``top_k_indices``), then
  directed retrieval (``direct_recall``);
- ``salience``: ``SalienceScores``; ``exchange_index``: a participant's consolidated exchanges as L4 and S1 search them.
"""
