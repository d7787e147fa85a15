"""The study definition: typed, frozen, and validated once when it is loaded.

The lab's default study (conditions, tasks, timings, system prompts, consent,
questionnaire items, memory parameters) is the tracked data file
``data/study/default_study.json``. A file named in ``STUDY_CONFIG`` (JSON or
YAML) overrides any part of it: nested mappings merge, every other value
(lists included) replaces. The merged result is checked here - an unknown or
misspelled key, a key given twice in a file, a value of the wrong type or an
unknown recall preset is refused with a ``StudyDefinitionError`` naming the key
and what is allowed - and becomes a frozen ``Study``. Code reads typed fields
(``study.timing.min_active_seconds``, ``study.memory.recall.top_k``,
``study.task("T2").questionnaire``); ``study.definition`` is the exact merged
definition, written with every export.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from services.platform.mappings import deep_merge
from services.recall.parameters import RecallParams, RetrievalSettings, resolve_recall_params, retrieval_from_config
from services.text.languages import LANGUAGES

DEFAULT_STUDY_FILE = Path(__file__).resolve().parents[2] / "data" / "study" / "default_study.json"
ITEM_TYPES = ("likert", "ios", "choice", "text", "attention")
ITEM_KEYS = ("id", "type", "text", "min", "max", "options", "required", "expected", "show_if", "labels")
# a display condition's comparisons: "show item B when item A >= 5" is {"item": "A", "op": ">=", "value": 5}
SHOW_IF_OPS = ("==", "!=", ">=", "<=", ">", "<")
RECALL_KEYS = ("preset", "presets", "overrides", "candidates", "top_k", "threshold", "salience_bonus", "g0_base",
               "g0_salience", "g_update_salience", "time_unit", "time_scale", "relevance", "directed_retrieval",
               "rehearsal_route")


class StudyDefinitionError(ValueError):
    """The study definition cannot run; the message names the key and what is allowed."""


# ---------------------------------------------------------------------------
# The typed definition
# ---------------------------------------------------------------------------

Text = Mapping[str, str]  # one wording per study language


@dataclass(frozen=True)
class Consent:
    version: str
    text: Text
    contact: Text | None = None  # the lab's contact details, shown with the consent text and on its copy
    erasure_on_withdrawal: bool = False  # the consent promises erasure: participants may withdraw and erase


@dataclass(frozen=True)
class Debrief:
    """Shown after the last task and after withdrawal; ``by_condition`` adds a paragraph for one condition."""
    title: Text
    text: Text
    by_condition: Mapping[str, Text]


@dataclass(frozen=True)
class Assignment:
    block_multiple: int = 1
    seed: int | None = None


@dataclass(frozen=True)
class ConditionParams:
    name: str
    recent_turns: int  # verbatim turns the condition keeps (its window, also within the task when manipulated)


@dataclass(frozen=True)
class Task:
    id: str
    unlock_offset_days: float
    title: Text
    instructions: Text
    questionnaire: tuple[str, ...] = ()
    min_participant_messages: int | None = None  # this task's engagement minimum; None: timing's
    randomise_instruments: bool = False  # the questionnaire's instruments in a random order per participant


@dataclass(frozen=True)
class Timing:
    task_active_seconds: float  # chat closes after this much active time
    min_active_seconds: float  # Finish is refused before this
    idle_gap_seconds: float  # gaps longer than this do not count as active time
    max_wall_seconds: float  # a task still open this long after start is closed as abandoned
    overdue_after_days: float  # an available task not started this long after unlock is overdue
    # a task ending with fewer participant messages (or less active time) is incomplete: no code, no pay
    min_participant_messages: int = 3
    # a message counts towards that minimum only with this much visible content: words (min_message_words)
    # or CJK characters (min_message_cjk_chars), mixed in proportion; 0 and 0 turns the check off
    min_message_words: int = 2
    min_message_cjk_chars: int = 4


@dataclass(frozen=True)
class Limits:
    max_message_chars: int
    max_text_answer_chars: int


@dataclass(frozen=True)
class TypingChecks:
    """When a typed chat message is implausible for a person at a keyboard (scripted or typed elsewhere):
    judged by services.participants.quality.typing_flags on the characters typed, i.e. not pasted."""
    min_chars: int  # messages with fewer typed characters are not judged
    max_chars_per_second: float  # more typed characters per second of typing than this is flagged
    min_keystrokes_per_char: float  # fewer key presses per typed character than this is flagged


@dataclass(frozen=True)
class Instrument:
    title: Text  # the construct, for researchers (export, codebook)
    items: tuple[Mapping[str, Any], ...]
    heading: Text | None = None  # what participants see above the items; no heading when not given
    randomise_items: bool = False  # the items in a random order per participant


@dataclass(frozen=True)
class MemorySettings:
    gist_max_chars: int
    salience_weights: Mapping[str, float]
    recall: RecallParams  # the effective forgetting-curve parameters (preset and overrides applied)
    recall_config: Mapping[str, Any]  # memory.recall as written, for tools that resolve other presets
    retrieval: RetrievalSettings  # the hybrid retriever behind L4's candidates and S1's fragments
    s1: Mapping[str, Any]
    r1: Mapping[str, Any]


@dataclass(frozen=True)
class PanelTask:
    completion_code: str | None = None  # shown after the task's questionnaire
    redirect_url: str | None = None  # back to the panel; {completion_code} and {external_id} are filled in
    incomplete_code: str | None = None  # the panel's "timed out / no engagement" code, for an incomplete task
    incomplete_redirect_url: str | None = None


@dataclass(frozen=True)
class Panel:
    id_parameter: str  # the URL parameter of /enter carrying the panel's participant id
    id_pattern: str  # a panel id must match this in full
    tasks: Mapping[str, PanelTask]
    return_link_grace_days: float  # return links expire this long after the last task unlocks
    id_case_sensitive: bool = False  # False: "AbC" and "abc" are one participant
    session_parameters: tuple[str, ...] = ()  # the panel's URL parameters stored with every entry
    max_participants: int | None = None  # panel accounts beyond this get the "study full" page
    full_code: str | None = None  # the panel's "no places" code on that page
    full_redirect_url: str | None = None


@dataclass(frozen=True)
class Registration:
    """Who may open an account with a username and password. ``password`` False: only the panel's link
    (the default when the panel hands out codes or caps places: a password account would bypass both)."""
    password: bool = True


def panel_configured(panel: Panel) -> bool:
    """The panel pays by completion codes or caps its places (``panel.tasks`` codes, ``max_participants``)."""
    return bool(panel.tasks) or panel.max_participants is not None or panel.full_code is not None


@dataclass(frozen=True)
class Payments:
    currency: str
    per_task: Mapping[str, float]
    completion_bonus: float
    pay_incomplete: bool = False  # whether a task below the minimum engagement is paid


# --- chat: reply pacing (issue 27 part 4; docs/reply_timing.md) ------------------------------------------
PACING_MODES = ("off", "floor", "match")


@dataclass(frozen=True)
class ReplyPacing:
    """``chat.reply_pacing``: how long a reply is held back so its timing does not reveal the condition.

    off: shown as soon as the model answers; floor: no reply visible before ``min_seconds`` (real seconds)
    after the message was received; match: each reply's time to its first visible token is drawn from one
    distribution shared by every condition, learned from the study's recent replies (services.chat.pacing),
    never below ``min_seconds``."""
    mode: str = "off"
    min_seconds: float = 0.0
    window: int = 200  # match: the recent replies per condition it learns from
    min_samples: int = 20  # match: below this many in any enabled condition, only min_seconds applies


@dataclass(frozen=True)
class ChatSettings:
    reply_pacing: ReplyPacing = ReplyPacing()


OPTIONAL_SECTIONS = ("chat", "report", "registration")


def _chat(raw: Any) -> ChatSettings:
    data = _section("chat", raw, ["reply_pacing"], optional=("reply_pacing",))
    return ChatSettings(reply_pacing=_reply_pacing(data.get("reply_pacing", {"mode": "off"})))


def _reply_pacing(raw: Any) -> ReplyPacing:
    path = "chat.reply_pacing"
    data = _mapping(path, raw)
    mode = _choice(f"{path}.mode", data.get("mode"), PACING_MODES)
    allowed = {"off": ["mode"], "floor": ["mode", "min_seconds"],
               "match": ["mode", "min_seconds", "window", "min_samples"]}[mode]
    data = _section(path, data, allowed, optional=("min_seconds", "window", "min_samples") if mode == "match" else ())
    pacing = ReplyPacing(mode=mode,
                         min_seconds=float(_typed(f"{path}.min_seconds", data.get("min_seconds", 0.0), float)),
                         window=_typed(f"{path}.window", data.get("window", 200), int),
                         min_samples=_typed(f"{path}.min_samples", data.get("min_samples", 20), int))
    if not 0 <= pacing.min_seconds <= 120:
        raise StudyDefinitionError(f"{path}.min_seconds must be between 0 and 120 (real seconds), not "
                                   f"{pacing.min_seconds:g}")
    if mode == "floor" and pacing.min_seconds <= 0:
        raise StudyDefinitionError(f"{path}.min_seconds must be above 0 in mode 'floor' (or use mode 'off')")
    if pacing.min_samples < 2 or pacing.window < pacing.min_samples:
        raise StudyDefinitionError(f"{path}: min_samples must be at least 2 and window at least min_samples")
    return pacing
# --- end of chat: reply pacing ---------------------------------------------------------------------------


REPORT_EXCLUDE_FLAGS = ("attention_failures", "pasted_messages", "implausible_typing_messages")


@dataclass(frozen=True)
class ReportSettings:
    """``flask --app app report``: the condition every contrast is taken against, and the participants.csv quality
    flags (counts above 0) that exclude a participant from the outcome models."""
    reference_condition: str
    exclude_flags: tuple[str, ...] = ("attention_failures",)


@dataclass(frozen=True)
class Study:
    name: str
    default_language: str
    consent: Consent
    panel: Panel
    payments: Payments
    enabled_conditions: tuple[str, ...]
    assignment: Assignment
    conditions: Mapping[str, ConditionParams]
    within_task_window_manipulated: bool
    system_prompts: Mapping[str, Text]
    tasks: tuple[Task, ...]
    timing: Timing
    limits: Limits
    memory: MemorySettings
    instruments: Mapping[str, Instrument]
    debrief: Debrief
    typing_checks: TypingChecks
    report: ReportSettings
    definition: Mapping[str, Any]  # the exact merged definition (read-only), stored with every export
    chat: ChatSettings = field(default_factory=ChatSettings)  # optional in the file
    # the published version (study_versions.version, services.study.versions) this is; None: not from the database
    version: int | None = None
    registration: Registration = Registration()  # study file: registration.password (see _registration)

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    @property
    def task_ids(self) -> list[str]:
        return [task.id for task in self.tasks]

    def as_dict(self) -> dict[str, Any]:
        """A plain, mutable copy of the exact definition (JSON-serialisable)."""
        return thaw(self.definition)

    def with_overrides(self, override: Mapping[str, Any]) -> Study:
        """A new study: this definition overridden the way a STUDY_CONFIG file overrides the default."""
        return build_study(deep_merge(self.as_dict(), override))


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_study(path: str | os.PathLike | None = None, *, overrides: Mapping[str, Any] | None = None) -> Study:
    """The default study, overridden by the file ``path`` (the entry point passes ``STUDY_CONFIG``), then
    ``overrides``."""
    definition = read_study_file(DEFAULT_STUDY_FILE)
    if path:
        definition = deep_merge(definition, read_study_file(Path(path)))
    if overrides:
        definition = deep_merge(definition, overrides)
    return build_study(definition)


def read_study_file(path: Path) -> dict[str, Any]:
    """A JSON or YAML study file as a mapping; a key given twice is refused (the second would silently win)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise StudyDefinitionError(f"study file {path}: cannot be read ({exc.strerror})") from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) if str(path).endswith((".yaml", ".yml")) else \
            json.loads(text, object_pairs_hook=_unique_pairs)
    except (ValueError, yaml.YAMLError) as exc:
        raise StudyDefinitionError(f"study file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise StudyDefinitionError(f"study file {path} must hold a mapping at the top level")
    return data


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise StudyDefinitionError(f"duplicate key {key!r}: a key may be given only once")
        seen[key] = value
    return seen


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key_node, deep=deep) for key_node, _ in node.value]
        for key in keys:
            if keys.count(key) > 1:
                raise StudyDefinitionError(f"duplicate key {key!r} (line {node.start_mark.line + 1}): a key may be "
                                           "given only once")
        return super().construct_mapping(node, deep=deep)


# ---------------------------------------------------------------------------
# Building and validating
# ---------------------------------------------------------------------------


def build_study(definition: Mapping[str, Any]) -> Study:
    """Validate a merged definition and build the frozen ``Study``; refuses anything that cannot run."""
    raw = _section("", definition, [f.name for f in fields(Study) if f.name not in ("definition", "version")],
                   optional=OPTIONAL_SECTIONS)
    panel = _panel(raw["panel"])
    study = Study(
        name=_typed("name", raw["name"], str),
        default_language=_choice("default_language", raw["default_language"], LANGUAGES),
        consent=_consent(raw["consent"]),
        panel=panel,
        payments=_payments(raw["payments"]),
        enabled_conditions=tuple(_str_list("enabled_conditions", raw["enabled_conditions"])),
        assignment=_dataclass("assignment", raw["assignment"], Assignment),
        conditions=_frozen({cid: _dataclass(f"conditions.{cid}", c, ConditionParams)
                            for cid, c in _mapping("conditions", raw["conditions"]).items()}),
        within_task_window_manipulated=_typed("within_task_window_manipulated",
                                              raw["within_task_window_manipulated"], bool),
        system_prompts=_frozen({key: _text(f"system_prompts.{key}", text)
                                for key, text in _mapping("system_prompts", raw["system_prompts"]).items()}),
        tasks=tuple(_task(i, t) for i, t in enumerate(_list("tasks", raw["tasks"]))),
        timing=_dataclass("timing", raw["timing"], Timing),
        limits=_dataclass("limits", raw["limits"], Limits),
        memory=_memory(raw["memory"]),
        instruments=_frozen({name: _instrument(name, i) for name, i in _mapping("instruments",
                                                                                raw["instruments"]).items()}),
        debrief=_debrief(raw["debrief"], list(_mapping("conditions", raw["conditions"]))),
        typing_checks=_typing_checks(raw["typing_checks"]),
        report=_report(raw.get("report"), _str_list("enabled_conditions", raw["enabled_conditions"])),
        definition=freeze(definition),
        chat=_chat(raw.get("chat", {})),
        registration=_registration(raw.get("registration"), panel),
    )
    _check_consistency(study)
    return study


def _check_consistency(study: Study) -> None:
    enabled = study.enabled_conditions
    if not enabled or not set(enabled) <= set(study.conditions):
        raise StudyDefinitionError(f"enabled_conditions {list(enabled)} must be a non-empty subset of the "
                                   f"conditions {sorted(study.conditions)}")
    if len(set(enabled)) != len(enabled):
        raise StudyDefinitionError("enabled_conditions lists a condition twice")
    if "base" not in study.system_prompts:
        raise StudyDefinitionError("system_prompts needs the paragraph 'base' every condition's prompt starts with")
    ids = study.task_ids
    if len(set(ids)) != len(ids):
        raise StudyDefinitionError("task ids must be unique")
    offsets = [t.unlock_offset_days for t in study.tasks]
    if offsets != sorted(offsets):
        raise StudyDefinitionError("task unlock offsets must not decrease")
    for task in study.tasks:
        for name in task.questionnaire:
            if name not in study.instruments:
                raise StudyDefinitionError(f"tasks.{task.id}.questionnaire names unknown instrument {name!r}; "
                                           f"allowed: {', '.join(sorted(study.instruments))}")
    _check_show_if(study)
    if study.timing.min_active_seconds > study.timing.task_active_seconds:
        raise StudyDefinitionError("timing.min_active_seconds exceeds timing.task_active_seconds")
    for path, task_ids in (("panel.tasks", study.panel.tasks), ("payments.per_task", study.payments.per_task)):
        unknown = [t for t in task_ids if t not in ids]
        if unknown:
            raise StudyDefinitionError(f"{path} names unknown task {unknown[0]!r}; allowed: {', '.join(ids)}")
    _check_codes(study)


def _check_codes(study: Study) -> None:
    """Mistakes a lab makes with panel codes and pay: refused at start-up rather than found by participants."""
    if study.timing.min_participant_messages < 0 or any((t.min_participant_messages or 0) < 0 for t in study.tasks):
        raise StudyDefinitionError("min_participant_messages must not be negative")
    if study.timing.min_message_words < 0 or study.timing.min_message_cjk_chars < 0:
        raise StudyDefinitionError("timing.min_message_words and timing.min_message_cjk_chars must not be negative")
    panel = study.panel
    if any(t.completion_code for t in panel.tasks.values()):
        unpaid = [t for t, amount in study.payments.per_task.items()
                  if amount > 0 and not (panel.tasks.get(t) and panel.tasks[t].completion_code)]
        if unpaid:
            raise StudyDefinitionError(
                f"payments.per_task pays {unpaid[0]} but panel.tasks.{unpaid[0]}.completion_code is missing: a "
                "participant who finishes it would get no code to claim the payment (give every paid task a code)")
    for task_id, task in panel.tasks.items():
        _check_redirect(f"panel.tasks.{task_id}", task.completion_code, task.redirect_url, "redirect_url")
        _check_redirect(f"panel.tasks.{task_id}", task.incomplete_code, task.incomplete_redirect_url,
                        "incomplete_redirect_url")
        if task.completion_code and task.completion_code == task.incomplete_code:
            raise StudyDefinitionError(f"panel.tasks.{task_id}.incomplete_code equals its completion_code: an "
                                       "incomplete task would be paid as complete")
    _check_redirect("panel", panel.full_code, panel.full_redirect_url, "full_redirect_url")


def _check_redirect(path: str, code: str | None, url: str | None, key: str) -> None:
    if url is None:
        return
    if not url.startswith(("https://", "http://")):
        raise StudyDefinitionError(f"{path}.{key} must be an http(s) URL")
    if "{completion_code}" not in url and not (code and code in url):
        raise StudyDefinitionError(f"{path}.{key} carries no code: write {{completion_code}} where the panel "
                                   "expects it (e.g. ...?cc={completion_code})")
    if "{completion_code}" in url and not code:
        raise StudyDefinitionError(f"{path}.{key} has {{completion_code}} but no code is given next to it")


_PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,63}")


def _panel(raw: Any) -> Panel:
    data = _section("panel", raw, [f.name for f in fields(Panel)],
                    optional=tuple(f.name for f in fields(Panel) if f.default is not MISSING))
    name = _typed("panel.id_parameter", data["id_parameter"], str)
    if not _PARAMETER_NAME.fullmatch(name):
        raise StudyDefinitionError(f"panel.id_parameter {name!r} is not a usable URL parameter name")
    pattern = _typed("panel.id_pattern", data["id_pattern"], str)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise StudyDefinitionError(f"panel.id_pattern is not a regular expression: {exc}") from exc
    tasks = {task_id: _dataclass(f"panel.tasks.{task_id}", entry, PanelTask)
             for task_id, entry in _mapping("panel.tasks", data["tasks"]).items()}
    grace = _typed("panel.return_link_grace_days", data["return_link_grace_days"], float)
    if grace < 0:
        raise StudyDefinitionError("panel.return_link_grace_days must not be negative")
    parameters = tuple(_str_list("panel.session_parameters", data.get("session_parameters", [])))
    for parameter in parameters:
        if not _PARAMETER_NAME.fullmatch(parameter) or parameter == name:
            raise StudyDefinitionError(f"panel.session_parameters: {parameter!r} is not a usable URL parameter "
                                       "name other than panel.id_parameter")
    cap = _typed("panel.max_participants", data.get("max_participants"), (int, type(None)))
    if cap is not None and cap < 1:
        raise StudyDefinitionError("panel.max_participants must be at least 1 (or null for no cap)")
    return Panel(id_parameter=name, id_pattern=pattern, tasks=_frozen(tasks), return_link_grace_days=grace,
                 id_case_sensitive=_typed("panel.id_case_sensitive", data.get("id_case_sensitive", False), bool),
                 session_parameters=parameters, max_participants=cap,
                 full_code=_typed("panel.full_code", data.get("full_code"), (str, type(None))),
                 full_redirect_url=_typed("panel.full_redirect_url", data.get("full_redirect_url"),
                                          (str, type(None))))


def _registration(raw: Any, panel: Panel) -> Registration:
    """``registration.password``: whether password accounts may be opened; by default not when the panel is
    configured (codes or a cap), so nobody reaches a panel's code or place without the panel's link."""
    data = _section("registration", raw if raw is not None else {}, ["password"], optional=("password",))
    default = not panel_configured(panel)
    return Registration(password=_typed("registration.password", data.get("password", default), bool))


def _payments(raw: Any) -> Payments:
    data = _section("payments", raw, [f.name for f in fields(Payments)], optional=("pay_incomplete",))
    amounts = {t: _typed(f"payments.per_task.{t}", v, float)
               for t, v in _mapping("payments.per_task", data["per_task"]).items()}
    bonus = _typed("payments.completion_bonus", data["completion_bonus"], float)
    if bonus < 0 or any(v < 0 for v in amounts.values()):
        raise StudyDefinitionError("payments: amounts must not be negative")
    return Payments(currency=_typed("payments.currency", data["currency"], str), per_task=_frozen(amounts),
                    completion_bonus=bonus,
                    pay_incomplete=_typed("payments.pay_incomplete", data.get("pay_incomplete", False), bool))


def _attention(where: str, item: Mapping[str, Any]) -> None:
    """An attention item's expected answer must be one it can be given."""
    allowed = ([o["value"] for o in item["options"]] if item.get("options")
               else list(range(item.get("min", 1), item.get("max", 7) + 1)))
    if item.get("expected") not in allowed:
        raise StudyDefinitionError(f"{where}.expected must be one of the item's answers {allowed}")


def _section(path: str, raw: Any, allowed: list[str], optional: tuple[str, ...] = ()) -> Mapping[str, Any]:
    """``raw`` as a mapping holding exactly the ``allowed`` keys (``optional`` ones may be missing)."""
    data = _mapping(path or "the study", raw)
    where = f"{path}." if path else ""
    unknown = [k for k in data if k not in allowed]
    collected = _problems.get()
    if unknown and collected is not None:  # the editor: name every unknown key, then go on without them
        collected.extend(Problem(f"{where}{k}", f"unknown key {where}{k}; allowed here: {', '.join(allowed)}",
                                 "unknown_key") for k in unknown)
        data = {k: v for k, v in data.items() if k in allowed}
    elif unknown:
        raise StudyDefinitionError(f"unknown key {where}{unknown[0]}; allowed here: {', '.join(allowed)}")
    missing = [k for k in allowed if k not in data and k not in optional]
    if missing:
        raise StudyDefinitionError(f"missing key {where}{missing[0]}")
    return data


def _mapping(path: str, raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise StudyDefinitionError(f"{path} must be a mapping, not {type(raw).__name__}")
    return raw


def _list(path: str, raw: Any) -> list[Any]:
    if not isinstance(raw, list):
        raise StudyDefinitionError(f"{path} must be a list, not {type(raw).__name__}")
    return raw


def _str_list(path: str, raw: Any) -> list[str]:
    return [_typed(f"{path}[{i}]", v, str) for i, v in enumerate(_list(path, raw))]


def _typed(path: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    """``value`` when it is of ``kind`` (ints count as floats, booleans as neither)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:
        kinds = (*kinds, int)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds if k is not int or float not in kinds)
        raise StudyDefinitionError(f"{path} must be {names}, not {value!r}")
    return value


def _choice(path: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise StudyDefinitionError(f"{path} is {value!r}; allowed: {', '.join(allowed)}")
    return value


def _text(path: str, raw: Any) -> Text:
    data = _section(path, raw, list(LANGUAGES))
    return _frozen({lang: _typed(f"{path}.{lang}", data[lang], str) for lang in LANGUAGES})


_FIELD_KINDS: dict[str, type | tuple[type, ...]] = {"int": int, "float": float, "str": str, "bool": bool,
                                                    "str | None": (str, type(None)),
                                                    "int | None": (int, type(None))}


def _dataclass(path: str, raw: Any, cls: type) -> Any:
    names = [f.name for f in fields(cls)]
    data = _section(path, raw, names, optional=tuple(f.name for f in fields(cls) if f.default is not MISSING))
    values = {}
    for f in fields(cls):
        if f.name in data:
            values[f.name] = _typed(f"{path}.{f.name}", data[f.name], _FIELD_KINDS[str(f.type)])
    return cls(**values)


def _report(raw: Any, enabled: list[str]) -> ReportSettings:
    """``report``: ``reference_condition`` (an enabled condition; null or absent: the first enabled one, L1 in the
    default study) and ``exclude_flags`` (a subset of REPORT_EXCLUDE_FLAGS)."""
    data = _section("report", raw if raw is not None else {}, ["reference_condition", "exclude_flags"],
                    optional=("reference_condition", "exclude_flags"))
    reference = data.get("reference_condition")
    if reference is None:
        reference = enabled[0] if enabled else ""
    elif reference not in enabled:
        raise StudyDefinitionError(f"report.reference_condition is {reference!r}; allowed: the enabled conditions "
                                   f"{', '.join(enabled)}")
    flags = _str_list("report.exclude_flags", data.get("exclude_flags", ["attention_failures"]))
    for flag in flags:
        _choice("report.exclude_flags[]", flag, REPORT_EXCLUDE_FLAGS)
    return ReportSettings(reference_condition=reference, exclude_flags=tuple(flags))


def _typing_checks(raw: Any) -> TypingChecks:
    checks = _dataclass("typing_checks", raw, TypingChecks)
    if checks.min_chars < 1 or checks.max_chars_per_second <= 0 or checks.min_keystrokes_per_char < 0:
        raise StudyDefinitionError("typing_checks: min_chars must be at least 1, max_chars_per_second positive "
                                   "and min_keystrokes_per_char not negative")
    return checks


def _consent(raw: Any) -> Consent:
    data = _section("consent", raw, ["version", "text", "contact", "erasure_on_withdrawal"],
                    optional=("contact", "erasure_on_withdrawal"))
    contact = data.get("contact")
    return Consent(version=_typed("consent.version", data["version"], str), text=_text("consent.text", data["text"]),
                   contact=None if contact is None else _text("consent.contact", contact),
                   erasure_on_withdrawal=_typed("consent.erasure_on_withdrawal",
                                                data.get("erasure_on_withdrawal", False), bool))


def _debrief(raw: Any, conditions: list[str]) -> Debrief:
    data = _section("debrief", raw, ["title", "text", "by_condition"], optional=("by_condition",))
    by_condition = _mapping("debrief.by_condition", data.get("by_condition") or {})
    for cid in by_condition:
        _choice("debrief.by_condition", cid, tuple(conditions))
    return Debrief(title=_text("debrief.title", data["title"]), text=_text("debrief.text", data["text"]),
                   by_condition=_frozen({cid: _text(f"debrief.by_condition.{cid}", text)
                                         for cid, text in by_condition.items()}))


def _task(index: int, raw: Any) -> Task:
    # named by its id when it has one, so a problem is reported where the editor shows that task
    path = f"tasks.{raw['id']}" if isinstance(raw, Mapping) and isinstance(raw.get("id"), str) else f"tasks[{index}]"
    data = _section(path, raw, [f.name for f in fields(Task)],
                    optional=("questionnaire", "min_participant_messages", "randomise_instruments"))
    path = f"tasks.{data['id']}" if isinstance(data.get("id"), str) else path
    return Task(id=_typed(f"{path}.id", data["id"], str),
                unlock_offset_days=_typed(f"{path}.unlock_offset_days", data["unlock_offset_days"], float),
                title=_text(f"{path}.title", data["title"]),
                instructions=_text(f"{path}.instructions", data["instructions"]),
                questionnaire=tuple(_str_list(f"{path}.questionnaire", data.get("questionnaire", []))),
                min_participant_messages=_typed(f"{path}.min_participant_messages",
                                                data.get("min_participant_messages"), (int, type(None))),
                randomise_instruments=_typed(f"{path}.randomise_instruments",
                                             data.get("randomise_instruments", False), bool))


def _instrument(name: str, raw: Any) -> Instrument:
    path = f"instruments.{name}"
    data = _section(path, raw, ["title", "heading", "items", "randomise_items"],
                    optional=("heading", "randomise_items"))
    items = []
    for i, item in enumerate(_list(f"{path}.items", data["items"])):
        where = f"{path}.items[{i}]"
        item = _section(where, item, list(ITEM_KEYS),
                        optional=("min", "max", "options", "required", "expected", "show_if", "labels"))
        _choice(f"{where}.type", item["type"], ITEM_TYPES)
        _text(f"{where}.text", item["text"])
        if item.get("show_if") is not None:
            _show_if(f"{where}.show_if", item["show_if"])
        if item.get("labels") is not None:
            _scale_labels(f"{where}.labels", item)
        if item["type"] == "attention":
            _attention(where, item)
        items.append(freeze(item))
    heading = data.get("heading")
    return Instrument(title=_text(f"{path}.title", data["title"]), items=tuple(items),
                      heading=None if heading is None else _text(f"{path}.heading", heading),
                      randomise_items=_typed(f"{path}.randomise_items", data.get("randomise_items", False), bool))


def _memory(raw: Any) -> MemorySettings:
    data = _section("memory", raw, ["gist_max_chars", "salience_weights", "recall", "retrieval", "s1", "r1"])
    weights = _section("memory.salience_weights", data["salience_weights"], ["intensity", "disclosure", "value"])
    recall = _section("memory.recall", data["recall"], list(RECALL_KEYS),
                      optional=tuple(k for k in RECALL_KEYS if k not in ("preset", "presets")))
    presets = _mapping("memory.recall.presets", recall["presets"])
    _recall_layer("memory.recall", recall)
    for name, layer in presets.items():
        _recall_layer(f"memory.recall.presets.{name}", layer)
    _recall_layer("memory.recall.overrides", recall.get("overrides") or {})
    if recall["preset"] not in presets:
        raise StudyDefinitionError(f"memory.recall.preset is {recall['preset']!r}; allowed: "
                                   f"{', '.join(sorted(presets))}")
    try:
        for name in presets:  # a typo inside any preset is found now, not when a study switches to it
            resolve_recall_params(recall, preset=name)
        params = resolve_recall_params(recall)
    except (ValueError, KeyError, TypeError) as exc:
        raise StudyDefinitionError(f"memory.recall: {exc}") from exc
    return MemorySettings(
        retrieval=_retrieval(data["retrieval"]),
        gist_max_chars=_typed("memory.gist_max_chars", data["gist_max_chars"], int),
        salience_weights=_frozen({k: _typed(f"memory.salience_weights.{k}", v, float) for k, v in weights.items()}),
        recall=params,
        recall_config=freeze(recall),
        s1=freeze(_s1(data["s1"])),
        r1=freeze(_section("memory.r1", data["r1"], _R1_KEYS)),
    )


# The S1 and R1 parameters (docs/conditions_s1_r1.md); their values live in the study data.
_PARAM_KEYS = [k for k in RECALL_KEYS if k not in ("preset", "presets", "overrides")]
_RELEVANCE_KEYS = ["method", "floor", "ceiling", "by_language", "embedder_model", "model", "fitted_for",
                   "false_recall_budget", "false_recall_budget_by_language", "anchor_days", "tails"]


def _retrieval(raw: Any) -> RetrievalSettings:
    """memory.retrieval: fusion weights, BM25's k1 and b, neighbouring exchanges (docs/recall_calibration.md)."""
    data = _section("memory.retrieval", raw, ["fusion", "k1", "b", "neighbour_turns"])
    fusion = _section("memory.retrieval.fusion", data["fusion"], ["lexical", "dense"])
    for key, value in fusion.items():
        _typed(f"memory.retrieval.fusion.{key}", value, float)
    _typed("memory.retrieval.k1", data["k1"], float)
    _typed("memory.retrieval.b", data["b"], float)
    _typed("memory.retrieval.neighbour_turns", data["neighbour_turns"], int)
    try:
        return retrieval_from_config(data)
    except ValueError as exc:
        raise StudyDefinitionError(str(exc)) from exc


def _recall_layer(path: str, raw: Any) -> None:
    """One layer of recall parameters (the seed constants, a preset, the overrides) names only known keys."""
    layer = _section(path, {k: v for k, v in _mapping(path, raw).items()
                            if k not in ("preset", "presets", "overrides") or path != "memory.recall"},
                     _PARAM_KEYS, optional=tuple(_PARAM_KEYS))
    if "relevance" in layer:
        relevance = _section(f"{path}.relevance", layer["relevance"], _RELEVANCE_KEYS,
                             optional=tuple(_RELEVANCE_KEYS))
        for lang, bounds in _mapping(f"{path}.relevance.by_language", relevance.get("by_language") or {}).items():
            _choice(f"{path}.relevance.by_language", lang, LANGUAGES)
            _section(f"{path}.relevance.by_language.{lang}", bounds, ["floor", "ceiling"])
        for key in ("false_recall_budget", "anchor_days"):
            if key in relevance:
                _typed(f"{path}.relevance.{key}", relevance[key], float)
        budgets = _mapping(f"{path}.relevance.false_recall_budget_by_language",
                           relevance.get("false_recall_budget_by_language") or {})
        for lang, budget in budgets.items():
            _choice(f"{path}.relevance.false_recall_budget_by_language", lang, LANGUAGES)
            _typed(f"{path}.relevance.false_recall_budget_by_language.{lang}", budget, float)
    _rules_after_the_curve(path, layer)
    if layer.get("candidates") is not None:
        _section(f"{path}.candidates", layer["candidates"], ["min_content_words", "min_salience", "recall_questions"],
                 optional=("min_content_words", "min_salience", "recall_questions"))


def _rules_after_the_curve(path: str, layer: Mapping[str, Any]) -> None:
    """The two recall rules that decide again after the forgetting curve: directed retrieval, the rehearsal route."""
    if layer.get("directed_retrieval") is not None:
        _section(f"{path}.directed_retrieval", layer["directed_retrieval"], ["enabled", "min_r", "min_margin"],
                 optional=("enabled", "min_r", "min_margin"))
        directed = layer["directed_retrieval"]
        if "enabled" in directed:
            _typed(f"{path}.directed_retrieval.enabled", directed["enabled"], bool)
        for key in ("min_r", "min_margin"):
            if key in directed:
                _typed(f"{path}.directed_retrieval.{key}", directed[key], float)
    if layer.get("rehearsal_route") is not None:
        _section(f"{path}.rehearsal_route", layer["rehearsal_route"], ["enabled"], optional=("enabled",))
        if "enabled" in layer["rehearsal_route"]:
            _typed(f"{path}.rehearsal_route.enabled", layer["rehearsal_route"]["enabled"], bool)


def _s1(raw: Any) -> dict[str, Any]:
    data = _section("memory.s1", raw, _S1_KEYS)
    if _typed("memory.s1.candidate_pool", data["candidate_pool"], int) < 1:
        raise StudyDefinitionError("memory.s1.candidate_pool must be at least 1")
    return data


_S1_KEYS = ["weights", "threshold", "max_fragments", "candidate_pool", "time_weight_floor", "time_decay_hours",
            "semantic_bounds", "fragment_max_chars", "summary_max_chars", "update_max_turns", "topic_turns"]
_R1_KEYS = ["max_chars", "merge_min_shared", "merge_overlap", "max_tokens"]


# ---------------------------------------------------------------------------
# Read-only views of nested data
# ---------------------------------------------------------------------------


class FrozenDict(dict):
    """A dict that refuses changes, so the study cannot be altered after validation; JSON writes it as a dict."""

    def _refuse(self, *_: Any, **__: Any) -> None:
        raise TypeError("the study definition is read-only; build a new one with Study.with_overrides")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __ior__(self, other: Any) -> FrozenDict:  # type: ignore[override]
        self._refuse()
        return self

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


def _frozen(data: dict[str, Any]) -> Mapping[str, Any]:
    return FrozenDict(data)


def freeze(value: Any) -> Any:
    """A read-only deep copy: mappings become FrozenDict, lists tuples."""
    if isinstance(value, Mapping):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A plain mutable copy of a frozen value (dicts and lists, as JSON has them)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def iter_items(study: Study, task: Task) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(instrument name, item) of a task's questionnaire, in order."""
    for name in task.questionnaire:
        for item in study.instruments[name].items:
            yield name, item


# ---------------------------------------------------------------------------
# Questionnaire display conditions (issue 29): "show item B when item A >= 5"
# ---------------------------------------------------------------------------


def _show_if(path: str, raw: Any) -> None:
    data = _section(path, raw, ["item", "op", "value"])
    _typed(f"{path}.item", data["item"], str)
    _choice(f"{path}.op", data["op"], SHOW_IF_OPS)
    _typed(f"{path}.value", data["value"], (float, str))
    if data["op"] not in ("==", "!=") and isinstance(data["value"], str):
        raise StudyDefinitionError(f"{path}.value must be a number for {data['op']}")


def _scale_labels(path: str, item: Mapping[str, Any]) -> None:
    """``labels``: words for points of a scale item, {"1": {"zh": ..., "en": ...}, "7": {...}} (any points)."""
    if item["type"] not in ("likert", "ios") and not (item["type"] == "attention" and not item.get("options")):
        raise StudyDefinitionError(f"{path}: only scale items (likert, ios, attention without options) have labels")
    low, high = item.get("min", 1), item.get("max", 7)
    for point, text in _mapping(path, item["labels"]).items():
        if not (isinstance(point, str) and point.lstrip("-").isdigit() and low <= int(point) <= high):
            raise StudyDefinitionError(f"{path}.{point} is not a point of the scale {low}-{high}")
        _text(f"{path}.{point}", text)


def _check_show_if(study: Study) -> None:
    """A display condition names an item shown earlier in every task that asks for its item."""
    for task in study.tasks:
        seen: set[str] = set()
        for name, item in iter_items(study, task):
            condition = item.get("show_if")
            if condition is not None and condition["item"] not in seen:
                raise StudyDefinitionError(
                    f"instruments.{name}.items[{[i['id'] for i in study.instruments[name].items].index(item['id'])}]"
                    f".show_if.item {condition['item']!r} is not an item asked before it in task {task.id}")
            seen.add(item["id"])
        if task.randomise_instruments and any(item.get("show_if") for _, item in iter_items(study, task)):
            raise StudyDefinitionError(f"tasks.{task.id}.randomise_instruments cannot be used with display "
                                       "conditions (show_if) in its questionnaire: the item they depend on might "
                                       "come after them")
    for name, instrument in study.instruments.items():
        if instrument.randomise_items and any(item.get("show_if") for item in instrument.items):
            raise StudyDefinitionError(f"instruments.{name}.randomise_items cannot be used with display conditions "
                                       "(show_if) among its items")


def shown(item: Mapping[str, Any], answers: Mapping[str, Any]) -> bool:
    """Whether ``item`` is shown given the answers so far (items without a display condition always are)."""
    condition = item.get("show_if")
    if not condition:
        return True
    answer = answers.get(condition["item"])
    if answer is None:
        return False
    op, value = condition["op"], condition["value"]
    if op in ("==", "!="):
        return (answer == value) == (op == "==")
    if isinstance(answer, bool) or not isinstance(answer, int | float):
        return False
    return {">=": answer >= value, "<=": answer <= value, ">": answer > value, "<": answer < value}[op]


# ---------------------------------------------------------------------------
# Problems, for the study editor (services.study.versions): every one named by its key
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    key: str  # the definition's path, e.g. "tasks.T1.title.en" ("" for the definition as a whole)
    message: str
    code: str = "invalid"  # unknown_key | missing_key | wrong_type | invalid | breaking_change

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "message": self.message, "code": self.code}


_problems: ContextVar[list[Problem] | None] = ContextVar("study_definition_problems", default=None)
_TOP_LEVEL = tuple(f.name for f in fields(Study) if f.name not in ("definition", "version"))
_PATH = re.compile(r"[A-Za-z_][\w\-]*(?:(?:\.[\w\-]+)|(?:\[\d+\]))*")


def find_problems(definition: Any) -> list[Problem]:
    """Every unknown key of ``definition`` (with its path), and the first other problem, as ``Problem``s;
    [] when ``build_study`` accepts it."""
    collected: list[Problem] = []
    token = _problems.set(collected)
    try:
        build_study(definition)
    except StudyDefinitionError as exc:
        collected.append(problem_of(str(exc)))
    finally:
        _problems.reset(token)
    return collected


def problem_of(message: str) -> Problem:
    """The key a validation message names (its leading path), with a code saying what kind of problem it is."""
    for prefix, code in (("unknown key ", "unknown_key"), ("missing key ", "missing_key")):
        if message.startswith(prefix):
            return Problem(message[len(prefix):].split(";")[0].strip(), message, code)
    match = _PATH.match(message)
    key = match.group(0) if match else ""
    if key.split(".")[0].split("[")[0] not in _TOP_LEVEL:
        key = ""
    return Problem(key, message, "wrong_type" if " must be " in message else "invalid")
