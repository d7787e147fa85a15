"""Accounts: registration behind consent, login, logout, admins. Passwords are salted scrypt hashes.

Passwords are checked with zxcvbn (its bundled lists of common passwords, names and keyboard
patterns; no network) and capped at MAX_PASSWORD characters before any hash is computed.
Logout and a password change raise the user's ``session_version``, which the login cookie
carries, so every session from before stops working.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from sqlalchemy import bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, joinedload
from werkzeug.security import check_password_hash, generate_password_hash
from zxcvbn import zxcvbn

from database.models import AuditLog, LoginAddress, User, username_key
from services.participants.consent import record_consent
from services.participants.input_checks import MAX_DB_ID, check_text
from services.participants.tombstone import tombstone_hash
from services.platform.clock import Clock, utc_iso
from services.platform.errors import BadInput, Conflict, Forbidden, Unauthorised
from services.study.assignment_service import assign, hold_slots
from services.study.definition import Study
from services.text.languages import prompt_language

USERNAME = re.compile(r"^[\w.\-]{3,32}$")
# erasure renames an account to erased-<code>; nobody may register such a name first
RESERVED_PREFIX = "erased-"
LOGIN_FAILED_ACTION = "login_failed"
TIME_ZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}$")
MIN_PASSWORD = 8
MAX_PASSWORD = 256  # a longer one would only cost hashing time (scrypt reads all of it)
# zxcvbn scores 0-4; 0 and 1 mean "guessed within about a million tries" (12345678, password, qwertyuiop)
MIN_PASSWORD_SCORE = 2
ZXCVBN_MAX_CHARS = 72  # zxcvbn's own input limit; a password this long is judged by its start
# How passwords are hashed: scrypt with N = 2^15, r = 8, p = 1 (werkzeug's default, ~0.1 s of CPU, written out so
# a library upgrade cannot change it unseen). A stored hash names its own parameters, so check_password_hash
# verifies any hash whatever this is. The test suite lowers N (tests/conftest.py: the same algorithm and code,
# 1/256 of the work; a test checks that a fresh process hashes with this value).
PASSWORD_METHOD = "scrypt:32768:8:1"


def hash_password(password: str) -> str:
    return generate_password_hash(password, method=PASSWORD_METHOD)


@lru_cache(maxsize=2)
def _dummy_hash(method: str) -> str:
    """Compared against when the username does not exist, so a wrong name costs as long as a wrong password."""
    return generate_password_hash("not-a-real-password", method=method)


# names a participant may not take, nor anything that looks like them (username_skeleton)
RESERVED_NAMES = ("admin", "administrator", "root", "system", "moderator", "researcher")
RESERVED_PREFIXES = (RESERVED_PREFIX, "erased:", "panel:")  # erasure's and panel accounts' names
# ASCII lookalikes folded after the table (TR39 keeps case, a username does not): one "l" for l, i, 1, |
_ASCII_FOLDS = str.maketrans({"1": "l", "i": "l", "|": "l", "!": "l", "0": "o", ".": "-", "_": "-", ":": "-"})
_ASCII_PAIRS = (("rn", "m"), ("vv", "w"), ("cl", "d"))


@lru_cache(maxsize=1)
def _prototypes() -> dict[str, str]:
    """Non-ASCII character -> the ASCII text it is confusable with, from Unicode's confusables table
    (confusables.txt of UTS #39, as the confusable-homoglyphs package ships it)."""
    from confusable_homoglyphs import utils

    table: dict[str, str] = {}
    for char, lookalikes in utils.load("confusables.json").items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_forms = [entry["c"] for entry in lookalikes if entry["c"].isascii() and entry["c"].strip()]
        if ascii_forms:
            table[char] = ascii_forms[0]
    return table


def username_skeleton(name: str) -> str:
    """The form two usernames that look alike share (after UTS #39's skeleton): NFKC, every character mapped
    to its ASCII prototype from the confusables table, case folded, then the ASCII lookalikes folded
    (l/i/1, o/0, rn/m, the separators . _ - :). "аdmin" (Cyrillic а), "ADMlN" and "admin" share one."""
    table = _prototypes()
    mapped = "".join(table.get(ch, ch) for ch in unicodedata.normalize("NFKC", name.strip()))
    folded = unicodedata.normalize("NFKC", mapped).casefold()
    for pair, single in _ASCII_PAIRS:
        folded = folded.replace(pair, single)
    return folded.translate(_ASCII_FOLDS)


def check_confusable(session: Session, username: str) -> None:
    """Refuse a participant name that looks like a reserved name (or prefix) or like an existing account's."""
    skeleton = username_skeleton(username)
    reserved = {username_skeleton(n) for n in RESERVED_NAMES}
    if skeleton in reserved or skeleton.startswith(tuple(username_skeleton(p) for p in RESERVED_PREFIXES)):
        raise BadInput("this username is reserved (or looks like a reserved one); please choose another",
                       code="reserved_username")
    for existing in session.scalars(select(User.username)):
        if username_skeleton(existing) == skeleton:
            raise Conflict("this username looks too much like one already taken; please choose another",
                           code="username_confusable")


def _check_credentials_shape(username: object, password: object) -> tuple[str, str]:
    check_text(username, "username")
    check_text(password, "password")
    if not isinstance(username, str) or not USERNAME.fullmatch(username.strip()):
        raise BadInput("username must be 3-32 letters, digits, '.', '-' or '_'", code="invalid_username")
    if username_key(username).startswith(RESERVED_PREFIX):
        raise BadInput(f"usernames starting with '{RESERVED_PREFIX}' are reserved; please choose another",
                       code="reserved_username")
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        raise BadInput(f"password must have at least {MIN_PASSWORD} characters", code="invalid_password")
    check_password_strength(password, username.strip())
    return username.strip(), password


def check_password_strength(password: str, username: str) -> None:
    """Refuse a password that is too long to hash cheaply, or common or trivial to guess."""
    if len(password) > MAX_PASSWORD:
        raise BadInput(f"password must have at most {MAX_PASSWORD} characters", code="password_too_long")
    verdict = zxcvbn(password[:ZXCVBN_MAX_CHARS], user_inputs=[username])
    if verdict["score"] < MIN_PASSWORD_SCORE:
        hint = verdict["feedback"].get("warning") or "it is too easy to guess"
        raise BadInput(f"please choose a less common password: {hint}", code="weak_password",
                       details={"warning": verdict["feedback"].get("warning") or "",
                                "suggestions": verdict["feedback"].get("suggestions", [])})


def find_user(session: Session, username: str) -> User | None:
    """The account a typed username names, compared case- and width-insensitively."""
    return session.scalar(select(User).where(User.username_key == username_key(username)))


def new_participant_code(session: Session) -> str:
    while True:
        code = "P" + secrets.token_hex(4).upper()
        if not session.scalar(select(User.id).where(User.participant_code == code)):
            return code


def places_taken(session: Session) -> int:
    """Participants holding a place under ``panel.max_participants``: every account not erased, panel or
    password (password accounts count when ``registration.password`` lets them in at all)."""
    return session.scalar(select(func.count(User.id)).where(User.role == "participant",
                                                            User.status != "erased")) or 0


def full_details(study: Study) -> dict[str, Any]:
    """The panel's "no places" code and redirect, shown to whoever cannot (or can no longer) take part."""
    code, url = study.panel.full_code, study.panel.full_redirect_url
    return {"completion_code": code,
            "redirect_url": url.replace("{completion_code}", code or "").replace("{external_id}", "") if url else url}


def study_full(study: Study) -> Conflict:
    return Conflict("this study has no places left", code="study_full", details=full_details(study))


def register(session: Session, *, username: object, password: object, consent: object, language: object,
             study: Study, clock: Clock, seed: int | None = None, attempts: int = 5,
             secret: str | None = None) -> User:
    """Create a participant and draw their condition, in one transaction; commits. Refused when the study
    file closes password registration (``registration.password: false``, the default with a panel), and
    counted against ``panel.max_participants`` when it is open."""
    if not study.registration.password:
        raise Forbidden("this study is entered through the recruitment panel's link only; password "
                        "registration is closed", code="password_registration_closed")
    cap = study.panel.max_participants
    if cap is not None and places_taken(session) >= cap:
        raise study_full(study)
    if consent is not True:
        raise BadInput("consent is required to take part", code="consent_required")
    username, password = _check_credentials_shape(username, password)
    if secret is not None and session.scalar(select(User.id).where(
            User.erased_name_hash == tombstone_hash(secret, "username", username))) is not None:
        # an erased participant's name (the tombstone keeps its keyed hash): not a new, naive participant
        raise Conflict("this username cannot be used; please choose another", code="username_unavailable")
    lang = prompt_language(language, study.default_language)
    # hashed before the first query: the slow hash must not hold a pooled connection
    password_hash = hash_password(password)
    if find_user(session, username) is not None:
        raise Conflict("this username is taken", code="username_taken")
    check_confusable(session, username)

    def taken(exc: IntegrityError) -> None:
        # the username went to a concurrent registration (else it took our block slot: retry the slot)
        if find_user(session, username) is not None:
            raise Conflict("this username is taken", code="username_taken") from exc

    def admit() -> None:
        if cap is not None:
            hold_slots(session)  # the slot counter's row lock: two registrations cannot share the last place
            if places_taken(session) >= cap:
                session.rollback()
                raise study_full(study)

    user, _ = enrol(session, study, clock, seed=seed, attempts=attempts, after_collision=taken, admit=admit,
                    fields={"username": username, "password_hash": password_hash, "language": lang})
    return user


def enrol(session: Session, study: Study, clock: Clock, *, fields: dict[str, Any], seed: int | None, attempts: int,
          after_collision: Callable[[IntegrityError], User | None], audit_action: str | None = None,
          admit: Callable[[], None] | None = None) -> tuple[User, bool]:
    """(user, created): a consented participant account made of ``fields`` (username, password_hash,
    language, ...) with its condition drawn, in one transaction; commits (with an ``audit_action`` entry).
    ``admit`` runs first in that transaction and may refuse by raising (the panel's cap, counted there).

    A unique-key collision is rolled back and handed to ``after_collision``, which returns an account to
    use instead (returned as not created), raises, or returns None: the concurrent registration took the
    assignment's block slot, so the next attempt draws again."""
    for _ in range(attempts):
        if admit is not None:
            admit()
        now = clock.now()
        user = User(**fields, role="participant", participant_code=new_participant_code(session), created_at=now,
                    consent_at=now, consent_version=study.consent.version, status="active",
                    study_version=study.version)
        session.add(user)
        try:
            session.flush()
            record_consent(session, user, study, now)
            assign(session, user, study, clock, seed=seed)
            if audit_action:
                session.add(AuditLog(at=now, action=audit_action, target_user_id=user.id,
                                     details={"participant_code": user.participant_code}))
            session.commit()
            return user, True
        except IntegrityError as exc:
            session.rollback()
            existing = after_collision(exc)
            if existing is not None:
                return existing, False
    raise Conflict("registration is busy, please try again", code="assignment_busy")


def authenticate(session: Session, username: object, password: object) -> User:
    if not isinstance(username, str) or not isinstance(password, str):
        raise BadInput("username and password are required", code="invalid_credentials_format")
    check_text(username, "username")
    check_text(password, "password")
    if len(password) > MAX_PASSWORD or len(username) > 256:
        raise Unauthorised("wrong username or password", code="invalid_credentials")
    user = find_user(session, username)
    if user is None:
        check_password_hash(_dummy_hash(PASSWORD_METHOD), password)
        raise Unauthorised("wrong username or password", code="invalid_credentials")
    if not check_password_hash(user.password_hash, password):
        raise Unauthorised("wrong username or password", code="invalid_credentials")
    return user


def address_hash(address: str | None, secret: str) -> str:
    """A keyed hash of a network address: comparable, but the address itself is never stored."""
    return hmac.new(secret.encode("utf-8"), (address or "").encode("utf-8"), hashlib.sha256).hexdigest()


def log_in(session: Session, username: object, password: object, *, address: str | None, secret: str,
           now: datetime) -> User:
    """``authenticate``, remembering the address of a success (the owner's own address is never locked out
    by others' guesses) and auditing a failure against an existing account (the monitor shows repeats).
    Commits."""
    try:
        user = authenticate(session, username, password)
    except Unauthorised:
        target = find_user(session, username) if isinstance(username, str) and len(username) <= 256 else None
        if target is not None:
            session.add(AuditLog(at=now, action=LOGIN_FAILED_ACTION, target_user_id=target.id,
                                 details={"address": address_hash(address, secret)[:12]}))
            session.commit()
        raise
    digest = address_hash(address, secret)
    row = session.scalar(select(LoginAddress).where(LoginAddress.user_id == user.id,
                                                    LoginAddress.address_hash == digest))
    if row is None:
        session.add(LoginAddress(user_id=user.id, address_hash=digest, last_success_at=now))
    else:
        row.last_success_at = now
    session.commit()
    return user


def is_owner_address(session: Session, username: object, address: str | None, secret: str) -> bool:
    """Whether the account ``username`` names has logged in from ``address`` before."""
    if not isinstance(username, str) or len(username) > 256:
        return False
    user = find_user(session, username)
    return user is not None and session.scalar(select(LoginAddress.id).where(
        LoginAddress.user_id == user.id, LoginAddress.address_hash == address_hash(address, secret))) is not None


def failed_logins(session: Session, since: datetime, *, at_least: int = 3) -> list[dict[str, Any]]:
    """Accounts with at least ``at_least`` failed logins since ``since``: who, how many, from how many
    addresses, the latest (for the admin monitor)."""
    counts: dict[int, list[AuditLog]] = {}
    for row in session.scalars(select(AuditLog).where(AuditLog.action == LOGIN_FAILED_ACTION, AuditLog.at >= since)
                               .order_by(AuditLog.id)):
        counts.setdefault(row.target_user_id, []).append(row)
    found = []
    for user_id, rows in counts.items():
        if len(rows) < at_least:
            continue
        user = session.get(User, user_id)
        found.append({"user_id": user_id, "username": user.username if user else None,
                      "role": user.role if user else None, "failures": len(rows),
                      "addresses": len({(r.details or {}).get("address") for r in rows}),
                      "last_at": utc_iso(rows[-1].at)})
    return sorted(found, key=lambda f: -f["failures"])


FAILED_LOGIN_WINDOW = timedelta(hours=24)


# in the time zone database but not a place's zone: a placeholder, and the system's own setting
NOT_ZONES = frozenset({"Factory", "localtime", "posixrules"})


@lru_cache(maxsize=1)
def canonical_zones() -> frozenset[str]:
    """The IANA zones a page may report: the database's zone names (not the right/ and posix/ copies, which
    ``available_timezones`` leaves out, nor ``NOT_ZONES``); backward names browsers still report
    (Asia/Calcutta) stay accepted."""
    return frozenset(available_timezones()) - NOT_ZONES


def set_time_zone(user: User, raw: object) -> None:
    """Store the IANA time zone the participant's page reported (reminders give times in it)."""
    if not isinstance(raw, str) or len(raw) > 64 or not TIME_ZONE.fullmatch(raw) or raw not in canonical_zones():
        raise BadInput("time_zone must be an IANA time zone such as Asia/Shanghai", code="invalid_time_zone")
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadInput(f"unknown time zone {raw!r}", code="invalid_time_zone") from None
    user.time_zone = raw


def create_admin(session: Session, username: str, password: str, clock: Clock) -> User:
    """Create an admin, or reset an existing admin's password. Commits."""
    username, password = _check_credentials_shape(username, password)
    user = find_user(session, username)
    if user is not None and user.role != "admin":
        raise Conflict(f"{username} is a participant account", code="username_taken")
    now = clock.now()
    if user is None:
        user = User(username=username, password_hash=hash_password(password), role="admin", staff_role="owner",
                    language="zh", created_at=now, status="active")
        session.add(user)
        action = "admin_created"
    else:
        user.password_hash = hash_password(password)
        end_sessions(user)
        action = "admin_password_reset"
    session.flush()
    session.add(AuditLog(at=now, action=action, target_user_id=user.id, details={"username": username}))
    session.commit()
    return user


def end_sessions(user: User) -> None:
    """Invalidate every session of ``user`` (the caller commits): logout, password change."""
    user.session_version = (user.session_version or 0) + 1


# The login's read, on every signed-in request, with the assignment (one joined read): a reply's prompt and pacing
# need the participant's memory group. Built once: a statement built per call is coerced and given its cache key
# anew every time, as much CPU as the read itself (docs/benchmarks.md, "CPU per reply, session 12").
_SESSION_USER = select(User).options(joinedload(User.assignment)).where(User.id == bindparam("user_id"))


def session_user(session: Session, cookie_id: str) -> User | None:
    """The user a login cookie names, or None when the cookie is malformed or its session was ended."""
    user_part, _, version_part = cookie_id.partition(".")
    if not (user_part.isascii() and user_part.isdigit() and version_part.isascii() and version_part.isdigit()):
        return None
    if int(user_part) > MAX_DB_ID:
        return None
    user = session.scalars(_SESSION_USER, {"user_id": int(user_part)}).one_or_none()
    if user is None or (user.session_version or 0) != int(version_part):
        return None
    return user


def bootstrap_admin(session: Session, clock: Clock) -> tuple[str, str] | None:
    """On the very first start with no admin, create ``admin`` with a generated password.

    Returns (username, password) for the caller to print once; None when an admin exists."""
    if session.scalar(select(User.id).where(User.role == "admin")):
        return None
    password = secrets.token_urlsafe(12)
    create_admin(session, "admin", password, clock)
    return "admin", password
