"""SQLAlchemy 2.0 typed models: the study's data.

Times are naive UTC ``datetime`` values taken from ``services.platform.clock`` (never
``datetime.now()`` directly), so tests and pilot runs can move time.
Every schema change is an Alembic revision under ``database/migrations``.
"""
from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates


def username_key(username: str) -> str:
    """The form two usernames are compared in: ``Name``, `` name`` and ``ＮＡＭＥ`` are one account.

    NFKC folds compatibility forms (full-width letters), casefold() is Unicode-aware lower-casing."""
    return unicodedata.normalize("NFKC", username.strip()).casefold()


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class User(Base):
    """A participant or an admin. Participants are known in exports only by ``participant_code``."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("external_id", name="uq_users_external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    # unique in the database, so two registrations differing only in case cannot both succeed
    username_key: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    # participant | admin | test (a pilot participant forced into a group, counted apart, not exported unless
    # asked for) | preview (an admin seeing a task as a condition's participant: never counted or exported)
    role: Mapped[str] = mapped_column(String(16), default="participant")
    participant_code: Mapped[str | None] = mapped_column(String(16), unique=True)
    language: Mapped[str] = mapped_column(String(8), default="zh")
    created_at: Mapped[datetime] = mapped_column(DateTime)
    consent_at: Mapped[datetime | None] = mapped_column(DateTime)
    consent_version: Mapped[str | None] = mapped_column(String(32))
    # the exact consent wording accepted (consent_texts.text_hash): the participant's copy is rebuilt from it
    consent_hash: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="active")  # active | withdrawn | erased
    withdrawn_at: Mapped[datetime | None] = mapped_column(DateTime)
    withdrawn_reason: Mapped[str | None] = mapped_column(Text)
    withdrawn_by: Mapped[str | None] = mapped_column(String(16))  # participant | admin
    last_active_at: Mapped[datetime | None] = mapped_column(DateTime)
    # part of the login cookie; raised by logout and password changes, which ends every older session
    session_version: Mapped[int] = mapped_column(Integer, default=0)
    # a panel's participant id (Prolific PID, Credamo/wjx id); one study per database, so unique
    external_id: Mapped[str | None] = mapped_column(String(64))
    # erasure leaves this row as the tombstone (code, enrolment, erasure time and reason)
    erased_at: Mapped[datetime | None] = mapped_column(DateTime)
    erasure_reason: Mapped[str | None] = mapped_column(Text)
    # the tombstone's keyed hashes (HMAC, services.participants.erasure_service.tombstone_hash) of the erased
    # panel id and username: that id or name cannot come back as a new, naive participant; neither is kept
    erased_id_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    erased_name_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    # the IANA time zone the participant's page reported (reminders give times in it); None: not known yet
    time_zone: Mapped[str | None] = mapped_column(String(64))
    # lab staff (role admin): owner | researcher | assistant | viewer (services/participants/staff.py); None for
    # participants and for admins from before roles, who are owners
    staff_role: Mapped[str | None] = mapped_column(String(16))
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime)
    # RFC 6238 second factor: the base32 secret, active once confirmed with a code
    totp_secret: Mapped[str | None] = mapped_column(String(64))
    totp_enabled_at: Mapped[datetime | None] = mapped_column(DateTime)
    # the published study version (study_versions.version) the participant enrolled under
    study_version: Mapped[int | None] = mapped_column(Integer)

    assignment: Mapped[Assignment | None] = relationship(back_populates="user", uselist=False)

    @validates("username")
    def _keep_username_key(self, _name: str, value: str) -> str:
        self.username_key = username_key(value)
        return value

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def memory_group(self) -> str | None:
        return self.assignment.memory_group if self.assignment else None

    # flask-login protocol
    is_authenticated = True
    is_anonymous = False

    @property
    def is_active(self) -> bool:
        return True

    def get_id(self) -> str:
        return f"{self.id}.{self.session_version or 0}"


class ConsentText(Base):
    """One wording of the consent form (text and contact, every language), by its hash, as participants
    accepted it; kept when the study file later changes, so each participant's copy shows what they agreed to."""

    __tablename__ = "consent_texts"

    text_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[str] = mapped_column(String(32))
    text: Mapped[dict[str, Any]] = mapped_column(JSON)
    contact: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    first_accepted_at: Mapped[datetime] = mapped_column(DateTime)


class Assignment(Base):
    """A participant's memory condition, drawn once by permuted blocks and never re-drawn."""

    __tablename__ = "assignments"
    __table_args__ = (UniqueConstraint("block_index", "slot_index", name="uq_assignment_slot"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), unique=True)
    memory_group: Mapped[str] = mapped_column(String(8), index=True)
    block_index: Mapped[int] = mapped_column(Integer)
    slot_index: Mapped[int] = mapped_column(Integer)
    block_sequence: Mapped[list[Any]] = mapped_column(JSON)  # the whole permuted block, for audit
    seed: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)

    user: Mapped[User] = relationship(back_populates="assignment")


class AssignmentCounter(Base):
    """The next assignment slot (a running count over every block). Registrations take slots by
    updating this one row, whose row lock makes simultaneous ones queue for a moment instead of
    drawing the same slot."""

    __tablename__ = "assignment_counter"

    id: Mapped[int] = mapped_column(primary_key=True)  # always 1
    next_slot: Mapped[int] = mapped_column(Integer)


class StaffToken(Base):
    """A one-time link for staff: an invitation (a new account with a role) or a password reset.
    Only the token's SHA-256 is stored."""

    __tablename__ = "staff_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # invite | reset
    username: Mapped[str] = mapped_column(String(64))
    staff_role: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    used_at: Mapped[datetime | None] = mapped_column(DateTime)


class AuditLog(Base):
    """Who did what to whom: assignments, admin creation, resets, withdrawals, exports."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    actor_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    action: Mapped[str] = mapped_column(String(64), index=True)
    target_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class TaskSession(Base):
    """One attempt at one task. A reset closes the attempt; a new one may then start."""

    __tablename__ = "task_sessions"
    __table_args__ = (
        UniqueConstraint("user_id", "task_id", "attempt", name="uq_task_attempt"),
        # at most one attempt that counts per task: two simultaneous starts cannot both succeed
        Index("uq_task_live_attempt", "user_id", "task_id", unique=True,
              sqlite_where=text("status != 'reset'"), postgresql_where=text("status != 'reset'")),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    task_id: Mapped[str] = mapped_column(String(8))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    # in_progress -> done; or reset / abandoned
    status: Mapped[str] = mapped_column(String(16), default="in_progress")
    phase: Mapped[str] = mapped_column(String(16), default="chat")  # chat | questionnaire | closed
    started_at: Mapped[datetime] = mapped_column(DateTime)
    last_activity_at: Mapped[datetime] = mapped_column(DateTime)
    active_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # study seconds
    idle_gap_count: Mapped[int] = mapped_column(Integer, default=0)
    idle_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    chat_ended_at: Mapped[datetime | None] = mapped_column(DateTime)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime)
    end_reason: Mapped[str | None] = mapped_column(String(32))  # finished | time_up | abandoned | reset
    reset_reason: Mapped[str | None] = mapped_column(Text)
    consolidation_status: Mapped[str] = mapped_column(String(16), default="pending")  # pending|running|done|failed|n/a
    # set when the questionnaire is in: complete, or incomplete (below the study's minimum engagement:
    # no completion code, and paid only when payments.pay_incomplete says so)
    outcome: Mapped[str | None] = mapped_column(String(16))
    # the published study version the attempt started under: it runs to its end under that version
    study_version: Mapped[int | None] = mapped_column(Integer)
    # the questionnaire's shown order when the definition randomises it: [[instrument, [item ids]], ...]
    questionnaire_order: Mapped[list[Any] | None] = mapped_column(JSON)


class Message(Base):
    """Every chat message. Assistant replies carry the exact context and prompt they were built from;
    user messages carry the per-message memory fields filled at consolidation."""

    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_user_created", "user_id", "id"),
                      UniqueConstraint("user_id", "idempotency_key", name="uq_messages_user_idempotency_key"))

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    task_session_id: Mapped[int] = mapped_column(ForeignKey("task_sessions.id"), index=True)
    task_id: Mapped[str] = mapped_column(String(8))
    role: Mapped[str] = mapped_column(String(16))  # user | assistant
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    # unique: a message has at most one reply, even when two retries race
    reply_to_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id"), unique=True)
    # -- assistant replies: reproducibility
    memory_group: Mapped[str | None] = mapped_column(String(8))
    memory_context: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    prompt: Mapped[list[Any] | None] = mapped_column(JSON)
    provider: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(128))
    params: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[list[Any] | None] = mapped_column(JSON)  # every provider tried, with outcome
    # -- assistant replies: timing and pacing (services.chat.pacing), milliseconds; the model's own latency
    # from asking it to its first token (a non-streamed reply: the whole answer), the delay added by
    # chat.reply_pacing, and the first visible token after the participant's message was stored
    model_first_token_ms: Mapped[float | None] = mapped_column(Float)
    model_total_ms: Mapped[float | None] = mapped_column(Float)
    pacing_delay_ms: Mapped[float | None] = mapped_column(Float)
    visible_first_token_ms: Mapped[float | None] = mapped_column(Float)
    # -- assistant replies: how much of the earlier tasks the memory context carried
    # (services.memory.context.memory_exposure: earlier_message_ids, profile_present, summary_present, tokens)
    memory_exposure: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # -- user messages: memory fields (filled by consolidation)
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)  # float32, L2-normalised
    embedding_model: Mapped[str | None] = mapped_column(String(128))
    importance_score: Mapped[float | None] = mapped_column(Float)
    emotional_intensity: Mapped[float | None] = mapped_column(Float)
    self_disclosure: Mapped[float | None] = mapped_column(Float)
    value_relevance: Mapped[float | None] = mapped_column(Float)
    emotional_salience: Mapped[float | None] = mapped_column(Float)
    consolidation_g: Mapped[float | None] = mapped_column(Float)
    recall_count: Mapped[int] = mapped_column(Integer, default=0)
    last_recall_at: Mapped[datetime | None] = mapped_column(DateTime)
    consolidated_at: Mapped[datetime | None] = mapped_column(DateTime)
    # -- user messages: data-quality signals reported by the participant page (None when not sent)
    typing_ms: Mapped[int | None] = mapped_column(Integer)  # first key, input, composition or paste to send
    keystrokes: Mapped[int | None] = mapped_column(Integer)
    pasted_chars: Mapped[int | None] = mapped_column(Integer)
    focus_losses: Mapped[int | None] = mapped_column(Integer)  # since the previous message of the task
    # `input` and `composition` events while writing it, and how most of its text arrived (quality.INPUT_KINDS)
    input_events: Mapped[int | None] = mapped_column(Integer)
    composition_events: Mapped[int | None] = mapped_column(Integer)
    input_kind: Mapped[str | None] = mapped_column(String(16))
    # why the message does not count towards the minimum engagement, or a signal was corrected
    # (services.participants.quality.content_flags): too_little_content, near_duplicate, pasted_chars_clamped
    content_flags: Mapped[list[Any] | None] = mapped_column(JSON)
    # the client's key for this message (user messages): a resent message is stored once
    idempotency_key: Mapped[str | None] = mapped_column(String(128))


class ProfileVersion(Base):
    """Every version of a participant's consolidated memory state; old versions are kept.

    ``kind`` is ``gist`` (L3/L4 profile), ``s1_summary`` (S1 structured summary)
    or ``r1_memory`` (R1 recursive memory)."""

    __tablename__ = "profile_versions"
    __table_args__ = (UniqueConstraint("user_id", "kind", "version", name="uq_profile_version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default="gist")
    version: Mapped[int] = mapped_column(Integer)
    task_id: Mapped[str | None] = mapped_column(String(8))
    content: Mapped[dict[str, Any]] = mapped_column(JSON)
    rendered: Mapped[str] = mapped_column(Text, default="")
    source: Mapped[str] = mapped_column(String(64))  # provider that produced it, e.g. offline
    consolidation_run_id: Mapped[int | None] = mapped_column(ForeignKey("consolidation_runs.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime)


class ConsolidationRun(Base):
    """One consolidation of one task session; a succeeded run makes a rerun a no-op."""

    __tablename__ = "consolidation_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    task_session_id: Mapped[int] = mapped_column(ForeignKey("task_sessions.id"), index=True)
    task_id: Mapped[str] = mapped_column(String(8))
    trigger: Mapped[str] = mapped_column(String(16))  # task_end | sweep | manual
    status: Mapped[str] = mapped_column(String(16))  # running | succeeded | failed | skipped
    started_at: Mapped[datetime] = mapped_column(DateTime)
    # the running run's last sign of life: it holds its claim until this is a lease old
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    steps: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    provider: Mapped[str | None] = mapped_column(String(64))


class RecallEvent(Base):
    """One candidate memory considered by forgetting-curve recall, recalled or not."""

    __tablename__ = "recall_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    query_message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"), index=True)
    memory_message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"), index=True)
    task_id: Mapped[str] = mapped_column(String(8))
    rank: Mapped[int] = mapped_column(Integer)
    cosine: Mapped[float] = mapped_column(Float)  # raw embedder similarity
    r: Mapped[float] = mapped_column(Float)  # relevance after calibration mapping, in [0, 1]
    t: Mapped[float] = mapped_column(Float)  # elapsed, in the configured time unit
    g_before: Mapped[float] = mapped_column(Float)
    g_after: Mapped[float] = mapped_column(Float)
    p: Mapped[float] = mapped_column(Float)  # forgetting-curve probability
    p_final: Mapped[float] = mapped_column(Float)  # with salience bonus
    salience: Mapped[float] = mapped_column(Float)
    recalled: Mapped[bool] = mapped_column(Boolean)
    # what recalled it: "curve", "directed" or "rehearsal" (services.recall); None when not recalled
    recalled_by: Mapped[str | None] = mapped_column(String(16))
    # the rehearsal route: the candidate message (of the same participant) the memory was reached through
    via_message_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class QuestionnaireResponse(Base):
    """One answer to one questionnaire item (long form)."""

    __tablename__ = "questionnaire_responses"
    __table_args__ = (UniqueConstraint("task_session_id", "item_id", name="uq_response_item"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    task_session_id: Mapped[int] = mapped_column(ForeignKey("task_sessions.id"))
    task_id: Mapped[str] = mapped_column(String(8))
    instrument: Mapped[str] = mapped_column(String(64))
    item_id: Mapped[str] = mapped_column(String(64))
    value: Mapped[Any] = mapped_column(JSON)
    submitted_at: Mapped[datetime] = mapped_column(DateTime)


class ProviderFailure(Base):
    """A failed call to an LLM or embedding provider, for the admin's failure log."""

    __tablename__ = "provider_failures"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    provider: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(128))
    purpose: Mapped[str] = mapped_column(String(32))  # reply | consolidation | embedding | ...
    error_class: Mapped[str] = mapped_column(String(128))
    status_code: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)  # the provider's own error text (data, not interface text)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id"))
    fallback_provider: Mapped[str | None] = mapped_column(String(64))
    # which try failed (0: not tried, the provider's circuit was open), what followed (retry | fallback | give_up)
    # and after how long the retry came: facts, put into words in the reader's language when shown
    try_number: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str | None] = mapped_column(String(16))
    retry_in_s: Mapped[float | None] = mapped_column(Float)


class ReturnLink(Base):
    """A personal link that logs a participant in. Only the SHA-256 of its token is stored."""

    __tablename__ = "return_links"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    purpose: Mapped[str] = mapped_column(String(16))  # task_end | reminder | admin
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime)


class PanelEntry(Base):
    """One arrival through the panel's link: who (when known), what happened, and the panel's session
    parameters the study file names (Prolific's STUDY_ID and SESSION_ID), for the lab's books."""

    __tablename__ = "panel_entries"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    # created | returned | refused (a known id from an unknown browser) | full | not_allowed | closed; only
    # created and returned name the account (refusals are stored apart from it)
    outcome: Mapped[str] = mapped_column(String(16), index=True)
    via: Mapped[str | None] = mapped_column(String(16))  # new | device | session (how a return was recognised)
    session_params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class PanelDevice(Base):
    """A browser that entered as a participant: the SHA-256 of its long-lived device cookie's token.

    One browser keeps one token; it may have entered as several participants (one row each)."""

    __tablename__ = "panel_devices"
    __table_args__ = (UniqueConstraint("user_id", "token_hash", name="uq_panel_device"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime)
    # the personal return link that bound this browser (None: the panel link); revoking the link unbinds it
    return_link_id: Mapped[int | None] = mapped_column(Integer)


class LoginAddress(Base):
    """An address an account has logged in from with its password (a keyed hash, never the address):
    other people's wrong guesses at the name never lock the owner out from there."""

    __tablename__ = "login_addresses"
    __table_args__ = (UniqueConstraint("user_id", "address_hash", name="uq_login_address"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    address_hash: Mapped[str] = mapped_column(String(64))
    last_success_at: Mapped[datetime] = mapped_column(DateTime)


class ContactDetail(Base):
    """How to reach a participant for reminders, encrypted with CONTACT_ENCRYPTION_KEY (Fernet)."""

    __tablename__ = "contact_details"
    __table_args__ = (UniqueConstraint("user_id", "channel", name="uq_contact_channel"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    channel: Mapped[str] = mapped_column(String(16))  # email | webhook
    encrypted: Mapped[bytes] = mapped_column(LargeBinary)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class Reminder(Base):
    """One reminder (task unlocked, or overdue) to one participant on one channel: sent once."""

    __tablename__ = "reminders"
    __table_args__ = (UniqueConstraint("user_id", "task_id", "kind", "channel", name="uq_reminder_once"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    task_id: Mapped[str] = mapped_column(String(8))
    kind: Mapped[str] = mapped_column(String(16))  # unlocked | overdue
    channel: Mapped[str] = mapped_column(String(16))  # email | webhook
    status: Mapped[str] = mapped_column(String(16))  # sending | sent | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime)  # start of the latest attempt
    sent_at: Mapped[datetime | None] = mapped_column(DateTime)
    error: Mapped[str | None] = mapped_column(String(255))


class RateLimitCounter(Base):
    """One fixed-window rate-limit counter (flask-limiter via ``database.rate_limit_store``), shared by
    every process and host on this database, so N workers do not allow N times a cap."""

    __tablename__ = "rate_limit_counters"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Float)  # Unix time the window ends


class Lease(Base):
    """A named, expiring claim held by one process (or one thread of it) across hosts.

    Used for what must happen in one place at a time when several processes share the
    database: the scheduler's leadership, one memory rewrite per participant. A holder
    that dies simply stops renewing; its lease expires and another holder takes over."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    acquired_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)


class DatabaseSetting(Base):
    """A fact recorded with the data it governs, e.g. ``day_seconds``: the time scale every stored unlock
    time and memory age was made under, so a restart with another one is noticed (services.platform.time_scale)."""

    __tablename__ = "database_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class PreflightReport(Base):
    """One pre-flight run (``flask --app app preflight``, ``services.research.preflight``): the study definition it
    proved the manipulation for (``study_hash``), the providers it ran with, and each check's figures and
    verdict. Registration waits for a passing one when REQUIRE_PREFLIGHT is set."""

    __tablename__ = "preflight_reports"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    study_hash: Mapped[str] = mapped_column(String(64), index=True)
    passed: Mapped[bool] = mapped_column(Boolean)
    embedder_model: Mapped[str | None] = mapped_column(String(255))
    chat_model: Mapped[str | None] = mapped_column(String(255))
    providers: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checks: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    duration_seconds: Mapped[float | None] = mapped_column(Float)


class StudyVersion(Base):
    """One published study definition (services.study.versions). The highest ``version`` is the live one;
    older ones are kept, since participants and their task sessions record the version they ran under."""

    __tablename__ = "study_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer, unique=True)
    study_hash: Mapped[str] = mapped_column(String(64), index=True)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(16))  # file (STUDY_CONFIG at start-up) | editor
    created_at: Mapped[datetime] = mapped_column(DateTime)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    reason: Mapped[str | None] = mapped_column(Text)
    draft_id: Mapped[int | None] = mapped_column(Integer)


class StudyDraft(Base):
    """A validated study definition saved in the editor; kept after it is published (``published_version``)."""

    __tablename__ = "study_drafts"

    id: Mapped[int] = mapped_column(primary_key=True)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    study_hash: Mapped[str] = mapped_column(String(64))
    based_on_version: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    published_version: Mapped[int | None] = mapped_column(Integer)


class DemoLink(Base):
    """A shareable demo of one condition (for an ethics board or co-authors): each opening makes a fresh
    preview account. Only the SHA-256 of its token is stored; revocable, and it expires."""

    __tablename__ = "demo_links"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    condition: Mapped[str] = mapped_column(String(8))
    language: Mapped[str] = mapped_column(String(8))
    label: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime)
    opened: Mapped[int] = mapped_column(Integer, default=0)
