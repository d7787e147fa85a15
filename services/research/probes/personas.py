"""Probe personas (issue 27, part 3): participants, written blind, who plant facts at T1 and come back to them.

The file (``data/probes/probe_personas_zh.json``, ``..._en.json``)::

    {"about": "...",
     "personas": {"en_p01": {"split": "dev" | "held-out" | "blind", "language": "en",
                             "facts": {"peanut_allergy": "allergic to peanuts", ...},
                             "T1": [[text, [fact ids]], ...],
                             "T2": [[text, [fact ids] or [], kind], ...], "T3": ..., "T4": ...}}}

``kind`` is ``explicit`` ("do you remember ..."), ``implicit`` (a request that needs the fact), ``control``
(off-topic: it must pull in no planted fact) or ``filler``. A probe (explicit or implicit) names at least one
fact planted at T1; a control or filler names none. ``load_probe_file`` validates all of it and raises one
``ProbeFileError`` listing every problem with its place in the file; nothing is half-loaded.

Pure: json and dataclasses only.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPLITS = ("dev", "held-out", "blind")
LANGUAGES = ("zh", "en")
TASKS = ("T1", "T2", "T3", "T4")
LATER_TASKS = TASKS[1:]
KINDS = ("explicit", "implicit", "control", "filler")
PROBE_KINDS = ("explicit", "implicit")
PROBE_DIR = Path(__file__).resolve().parents[3] / "data" / "probes"
DEFAULT_FILES = {lang: PROBE_DIR / f"probe_personas_{lang}.json" for lang in ("zh", "en")}


class ProbeFileError(ValueError):
    """A probe file that cannot be used, with every problem found (``problems``)."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        shown = "\n  ".join(self.problems[:30]) + (f"\n  ... and {len(self.problems) - 30} more"
                                                    if len(self.problems) > 30 else "")
        super().__init__(f"{source}: {len(self.problems)} problem(s) in the probe personas:\n  {shown}")


@dataclass(frozen=True)
class ProbeTurn:
    """One message of a persona's script. At T1 ``kind`` is ``plant`` (it states facts) or ``filler``."""

    task: str
    index: int
    text: str
    facts: tuple[str, ...]
    kind: str

    @property
    def is_probe(self) -> bool:
        return self.kind in PROBE_KINDS


@dataclass(frozen=True)
class ProbePersona:
    id: str
    split: str
    language: str
    facts: dict[str, str]
    script: dict[str, tuple[ProbeTurn, ...]] = field(default_factory=dict)

    def planted_by(self, fact: str) -> list[int]:
        """Positions of the T1 messages that plant ``fact``."""
        return [t.index for t in self.script["T1"] if fact in t.facts]

    def probes(self) -> list[ProbeTurn]:
        return [t for task in LATER_TASKS for t in self.script[task] if t.is_probe]


def _turn(persona: str, task: str, index: int, raw: Any, facts: Mapping[str, str],
          problems: list[str]) -> ProbeTurn | None:
    where = f"{persona}.{task}[{index}]"
    size = 2 if task == "T1" else 3
    if not isinstance(raw, list | tuple) or len(raw) != size:
        shape = "[text, [fact ids]]" if task == "T1" else "[text, [fact ids], kind]"
        problems.append(f"{where}: a turn is {shape}, got {raw!r:.80}")
        return None
    text, ids = raw[0], raw[1]
    if not isinstance(text, str) or not text.strip():
        problems.append(f"{where}: the text must be a non-empty string")
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        problems.append(f"{where}: the fact ids must be a list of strings, got {ids!r:.80}")
        return None
    unknown = [i for i in ids if i not in facts]
    if unknown:
        problems.append(f"{where}: fact id(s) {', '.join(unknown)} not among the persona's facts")
    if task == "T1":
        return ProbeTurn(task, index, text, tuple(ids), "plant" if ids else "filler")
    kind = raw[2]
    if kind not in KINDS:
        problems.append(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
        return None
    if kind in PROBE_KINDS and not ids:
        problems.append(f"{where}: an {kind} probe must name the fact(s) it asks about")
    if kind not in PROBE_KINDS and ids:
        problems.append(f"{where}: a {kind} turn names no fact, got {ids}")
    return ProbeTurn(task, index, text, tuple(ids), kind)


def _persona(pid: str, raw: Any, problems: list[str]) -> ProbePersona | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{pid}: a persona is an object")
        return None
    before = len(problems)
    split, language, facts = raw.get("split"), raw.get("language"), raw.get("facts")
    if split not in SPLITS:
        problems.append(f"{pid}: split {split!r} is not one of {', '.join(SPLITS)}")
    if language not in LANGUAGES:
        problems.append(f"{pid}: language {language!r} is not one of {', '.join(LANGUAGES)}")
    if not isinstance(facts, Mapping) or not facts or not all(isinstance(v, str) for v in facts.values()):
        problems.append(f"{pid}: facts must be a non-empty object of fact id -> description")
        facts = {}
    script: dict[str, tuple[ProbeTurn, ...]] = {}
    for task in TASKS:
        turns = raw.get(task)
        if not isinstance(turns, list) or not turns:
            problems.append(f"{pid}.{task}: a non-empty list of turns is needed")
            continue
        parsed = [_turn(pid, task, i, t, facts, problems) for i, t in enumerate(turns)]
        script[task] = tuple(t for t in parsed if t is not None)
    if len(problems) > before:
        return None
    persona = ProbePersona(pid, split, language, dict(facts), script)
    for turn in persona.probes():
        missing = [f for f in turn.facts if not persona.planted_by(f)]
        if missing:
            problems.append(f"{pid}.{turn.task}[{turn.index}]: asks about {', '.join(missing)}, planted in no T1 "
                            "message (nothing to bring back)")
    return persona if len(problems) == before else None


def parse_probe_data(data: Any, source: str = "<probe personas>") -> list[ProbePersona]:
    """Validated personas from a parsed probe file; ``ProbeFileError`` lists every problem."""
    problems: list[str] = []
    if not isinstance(data, Mapping) or not isinstance(data.get("personas"), Mapping) or not data["personas"]:
        raise ProbeFileError(source, ["the file must be an object with a non-empty 'personas' object"])
    personas = [_persona(str(pid), raw, problems) for pid, raw in data["personas"].items()]
    if problems:
        raise ProbeFileError(source, problems)
    return [p for p in personas if p is not None]


def load_probe_file(path: str | Path) -> list[ProbePersona]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProbeFileError(str(path), ["no such file"]) from exc
    except json.JSONDecodeError as exc:
        raise ProbeFileError(str(path), [f"not valid JSON: {exc}"]) from exc
    return parse_probe_data(data, str(path))


def load_probe_files(paths: Iterable[str | Path]) -> list[ProbePersona]:
    personas: list[ProbePersona] = []
    for path in paths:
        personas += load_probe_file(path)
    seen: set[str] = set()
    duplicates = [p.id for p in personas if p.id in seen or seen.add(p.id)]
    if duplicates:
        raise ProbeFileError(", ".join(str(p) for p in paths), [f"persona id {d} appears twice" for d in duplicates])
    return personas


def select(personas: Iterable[ProbePersona], *, languages: Iterable[str] | None = None,
           splits: Iterable[str] | None = None) -> list[ProbePersona]:
    """The personas of these languages and splits (None: all)."""
    languages = set(languages) if languages is not None else set(LANGUAGES)
    splits = set(splits) if splits is not None else set(SPLITS)
    unknown = (languages - set(LANGUAGES)) | (splits - set(SPLITS))
    if unknown:
        raise ValueError(f"unknown language or split: {', '.join(sorted(unknown))}")
    return [p for p in personas if p.language in languages and p.split in splits]
