"""Recall through a rehearsal: a memory the message reaches directly and through an exchange that recalled it.

When L4 recalls memory M for a message Q′, the exchange of Q′ (the participant's request and the reply that
drew on M) is a rehearsal of M: the context M was retrieved in joins its trace (encoding variability, Estes,
1955; the episodic-context account of retrieval practice, Karpicke, Lehman & Aue, 2014). A later message that
resembles Q′ then finds M through Q′ as well as through M's own words: "suggest a menu I can eat for his
family's lunch" shares little with "we are Jain, no onion or garlic", and much with the earlier "a quick sabzi
recipe I can eat" that brought the diet back.

The rule, a second decision on the scored candidates after the curve (``recall_through_rehearsals``):

- M and Q′ are both among the message's top-k candidates: the two routes converge on M (a memory reached only
  through its rehearsal's neighbour is not; on the development personas that alone let an off-topic question
  about chess pull in a daughter's soccer through "snack ideas for a long tournament");
- Q′ recalled M (a recall event with ``recalled`` true, however it was recalled);
- the curve did not recall M;
- with Q′'s relevance in place of M's own (when higher), M's own curve, i.e. its age since its last recall and its
  consolidation g, reaches the threshold. So the consolidation a rehearsal earned is what carries M forward,
  as the seed's update intends, and a memory rehearsed long ago still fades.

M is then recalled and consolidated as any recall is. Nothing here touches the database: the links (which
consolidated message recalled which memory) come with the participant's index (``services.memory.hybrid``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from services.recall.formulas import final_probability, recall_probability, updated_g


@dataclass(frozen=True)
class RehearsalRoute:
    """``memory.recall.rehearsal_route``: whether a memory may come back through an exchange that recalled it."""

    enabled: bool = False  # absent from a study file: off (the default study turns it on)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# why a candidate reached through a rehearsal was or was not recalled (recorded with each decision)
REASONS = ("reached", "already_recalled", "not_more_relevant", "below_threshold")


def recall_through_rehearsals(candidates: Sequence[Any], links: Mapping[int, frozenset[int]], rule: RehearsalRoute,
                              *, threshold: float, salience_bonus: float,
                              g_update_salience: float) -> tuple[list[Any], list[dict[str, Any]] | None]:
    """The candidates after the rehearsal route, and one decision per candidate another candidate had recalled
    (None: the rule is off).

    ``candidates``: ``RecallCandidate`` values in rank order, scored by the curve. ``links``: for a message id,
    the ids of the memories it recalled. A decision records the memory, the rehearsal it was reached through (the
    most relevant one), both r, the curve's p_final with the rehearsal's r, ``recalled`` and the ``reason``."""
    if not rule.enabled:
        return list(candidates), None
    result = list(candidates)
    decisions: list[dict[str, Any]] = []
    for position, memory in enumerate(candidates):
        routes = [c for c in candidates if c.message_id != memory.message_id
                  and memory.message_id in links.get(c.message_id, ())]
        if not routes:
            continue
        via = max(routes, key=lambda c: c.r)
        decision: dict[str, Any] = {"message_id": memory.message_id, "via_message_id": via.message_id,
                                    "r": memory.r, "via_r": via.r, "p_final": None, "recalled": False}
        if memory.recalled:
            decisions.append({**decision, "reason": "already_recalled"})
            continue
        if via.r <= memory.r:
            decisions.append({**decision, "reason": "not_more_relevant"})
            continue
        p_final = float(final_probability(recall_probability(via.r, memory.t, memory.g_before), memory.salience,
                                          salience_bonus))
        decision["p_final"] = p_final
        if p_final < threshold:
            decisions.append({**decision, "reason": "below_threshold"})
            continue
        g_after = float(updated_g(memory.g_before, memory.spacing_days if memory.spacing_days is not None else 0.0,
                                  memory.salience, g_update_salience))
        result[position] = replace(memory, recalled=True, g_after=g_after, recalled_by="rehearsal",
                                   via_message_id=via.message_id, via_r=via.r, via_p_final=p_final)
        decisions.append({**decision, "recalled": True, "reason": "reached"})
    return result, decisions
