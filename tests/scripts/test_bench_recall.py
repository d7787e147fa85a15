"""scripts/bench_recall.py runs end to end on a small store (its timings are not asserted: speed is
recorded in docs/benchmarks.md, never tested)."""
from __future__ import annotations

import re

from scripts import bench_recall


def test_bench_recall_runs_and_recalls_the_planted_memories(capsys):
    assert bench_recall.main(["--memories", "60", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "built 60 memories" in out
    # memories planted next to the query are recalled (and so written) by the warm path, with the calibrated preset
    assert re.search(r"recalled per query: [1-3]\b", out)
    for label in ("index cached (warm)", "CPU time of the calling thread", "no cache", "ranking + scoring core"):
        assert label in out
