"""The exchange index: a reply's verbatim quote of another of the participant's messages is not indexed
with it, so an exchange is not recalled for what another exchange said (the echo traced in
docs/simulation.md: "That reminds me, you told me: '…'")."""
from __future__ import annotations

import numpy as np

from services.recall.exchange_index import Exchange, ExchangeIndex, index_texts, without_quotes
from services.recall.parameters import RetrievalSettings
from services.recall.retrieval import FusionWeights

DINNER = "Tonight I'm thinking of a big seafood dinner with friends. What do you think?"
PLAN = "My application materials are due next week. How should I plan my time?"


def test_a_reply_loses_its_quotes_of_the_participants_other_messages_only():
    reply = f'That reminds me, you told me: "{DINNER}" Could you tell me a bit more?'
    assert DINNER not in without_quotes(reply, PLAN, [DINNER, PLAN, "ok"])
    assert "Could you tell me a bit more?" in without_quotes(reply, PLAN, [DINNER, PLAN])
    own = f'You said "{PLAN}" — start with the deadline.'
    assert without_quotes(own, PLAN, [DINNER, PLAN]) == own  # its own message stays
    assert without_quotes("ok, ok.", PLAN, ["ok"]) == "ok, ok."  # too short to be a quote
    assert without_quotes(None, PLAN, [DINNER]) is None


def test_an_exchange_whose_reply_quoted_a_memory_is_not_recalled_for_that_memory():
    exchanges = [
        Exchange(1, "T2", 2, DINNER, "Sounds fun; enjoy it."),
        Exchange(1, "T2", 2, PLAN, f'That reminds me, you told me: "{DINNER}" How do you feel about it now?'),
        Exchange(1, "T2", 2, "My cat Mochi follows me everywhere.", "She sounds sweet."),
    ]
    texts, _ = index_texts(exchanges, neighbour_turns=0)
    assert "seafood" in texts[0] and "seafood" not in texts[1]
    # no dense signal (all vectors equal): the lexical side alone decides
    vectors = np.ones((3, 4), dtype=np.float32) / 2.0
    index = ExchangeIndex(exchanges, vectors, np.ones(3, dtype=bool),
                          RetrievalSettings(fusion=FusionWeights(lexical=1.5, dense=1.0), k1=1.2, b=0.5,
                                            neighbour_turns=0))
    ranked = index.rank("Recommend a seafood dinner for me tonight.", vectors[0], k=3)
    assert ranked[0].memory_id == 0
    scores = {s.memory_id: s.fused for s in ranked}
    assert scores[1] <= scores[2] + 1e-9  # the quoting exchange is no closer than an unrelated one
