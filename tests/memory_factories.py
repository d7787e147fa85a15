"""Small factories for memory tests: participants, finished task sessions and their messages,
written straight into the database (no HTTP), with times taken from the test's ManualClock."""
from __future__ import annotations

from sqlalchemy.orm import Session

from database.models import Assignment, Message, TaskSession, User
from services.platform.clock import ManualClock

# T1 of the scenario in SPEC/issue 3: name, seafood allergy, a cat and PhD-application anxiety are told
# in the first four turns; six more turns push the first three out of L2's seven-turn window.
T1_ZH = [
    ("你好，我叫李明。", "你好李明，很高兴认识你！"),
    ("我对海鲜过敏，吃饭得特别注意。", "明白，过敏确实要小心。"),
    ("我家里养了一只猫，叫团子。", "团子这个名字真可爱。"),
    ("最近在申请博士，压力很大，很焦虑。", "申请博士确实不容易，你已经很努力了。"),
    ("我周末喜欢去爬山。", "爬山很放松。"),
    ("今天天气还不错。", "是啊，适合出去走走。"),
    ("我平时喜欢看书。", "你喜欢看什么书？"),
    ("晚饭吃了面条。", "面条听起来不错。"),
    ("最近在追一部电视剧。", "是什么剧呀？"),
    ("好的，今天就聊到这里吧。", "好的，下次见！"),
]

T1_EN = [
    ("Hi, my name is Anna.", "Nice to meet you, Anna!"),
    ("I'm allergic to shellfish, so I have to be careful when eating out.", "That sounds important."),
    ("I have a cat called Milo.", "Milo is a lovely name."),
    ("I'm applying for a PhD and I'm really anxious about it.", "That is a big step."),
    ("I love hiking on weekends.", "Hiking is great."),
]


def make_participant(session: Session, clock: ManualClock, *, username: str, group: str | None,
                     language: str = "zh") -> User:
    user = User(username=username, password_hash="not-a-real-hash", role="participant",
                participant_code=f"P-{username}"[:16], language=language, created_at=clock.now())
    session.add(user)
    session.flush()
    if group is not None:
        session.add(Assignment(user_id=user.id, memory_group=group, block_index=user.id, slot_index=0,
                               block_sequence=[group], created_at=clock.now()))
        session.flush()
    return user


def add_task(session: Session, clock: ManualClock, user: User, task_id: str, turns: list[tuple[str, str | None]],
             *, status: str = "done", phase: str = "closed", seconds_per_message: float = 30.0) -> TaskSession:
    """A task session with the given (user, assistant) turns; the clock moves on with each message."""
    ts = TaskSession(user_id=user.id, task_id=task_id, attempt=1, status=status, phase=phase,
                     started_at=clock.now(), last_activity_at=clock.now(), consolidation_status="pending")
    session.add(ts)
    session.flush()
    for user_text, reply in turns:
        add_message(session, clock, ts, "user", user_text, seconds=seconds_per_message)
        if reply is not None:
            last = session.query(Message).filter_by(task_session_id=ts.id).order_by(Message.id.desc()).first()
            add_message(session, clock, ts, "assistant", reply, reply_to=last, seconds=seconds_per_message)
    if phase != "chat":
        ts.chat_ended_at = clock.now()
        ts.end_reason = "finished"
    if status == "done":
        ts.completed_at = clock.now()
    session.flush()
    return ts


def add_message(session: Session, clock: ManualClock, ts: TaskSession, role: str, text: str, *,
                reply_to: Message | None = None, seconds: float = 30.0) -> Message:
    clock.advance(seconds)
    message = Message(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, role=role, content=text,
                      created_at=clock.now(), reply_to_id=reply_to.id if reply_to else None)
    session.add(message)
    session.flush()
    return message


class CachedEmbedder:
    """The real offline embedder with a per-process cache: tests embed the same scenario texts many times."""

    def __init__(self) -> None:
        from services.llm.providers.offline import OfflineEmbeddingProvider

        self._inner = OfflineEmbeddingProvider()
        self.name, self.model, self.dim = self._inner.name, self._inner.model, self._inner.dim
        self._cache: dict[tuple[bool, str], object] = {}

    def _embed(self, texts: list[str], query: bool):
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if (query, t) not in self._cache]
        if missing:
            vectors = self._inner.embed_queries(missing) if query else self._inner.embed_passages(missing)
            self._cache.update({(query, t): v for t, v in zip(missing, vectors, strict=True)})
        return np.array([self._cache[(query, t)] for t in texts], dtype=np.float32).reshape(len(texts), self.dim)

    def embed_queries(self, texts: list[str]):
        return self._embed(list(texts), True)

    def embed_passages(self, texts: list[str]):
        return self._embed(list(texts), False)


EMBEDDER = CachedEmbedder()
