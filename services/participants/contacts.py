"""Participants' contact details for reminders, encrypted at rest.

Kept in the study database so that erasure removes them with everything else,
but only as Fernet tokens (AES-128-CBC + HMAC-SHA256, from ``cryptography``)
under ``CONTACT_ENCRYPTION_KEY``, which lives in the environment and never in
the database or an export: a copy of the database alone reveals no address.
Without a key nothing can be stored, and the lab's contacts CSV
(``REMINDER_CONTACTS``, outside the database) is the only source.

Channels: ``email`` (an address, for SMTP) and ``webhook`` (a phone number,
WeChat id or panel handle, passed on to the lab's webhook that sends SMS,
WeChat or panel messages).
"""
from __future__ import annotations

import re
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from database.models import ContactDetail, User
from database.participant_lock import hold_participant
from services.platform.errors import BadInput, Conflict

CHANNELS = ("email", "webhook")
EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")
MAX_ADDRESS = 254


def cipher(key: str | None) -> Fernet | None:
    """The Fernet cipher for ``key`` (a urlsafe-base64 32-byte key, e.g. Fernet.generate_key()); None if unset."""
    if not key:
        return None
    try:
        return Fernet(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError("CONTACT_ENCRYPTION_KEY is not a Fernet key (generate one with "
                         "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
                         ) from exc


def _clean(channel: object, value: object) -> tuple[str, str | None]:
    if channel not in CHANNELS:
        raise BadInput(f"channel must be one of {', '.join(CHANNELS)}", code="invalid_contact")
    if value is None or (isinstance(value, str) and not value.strip()):
        return channel, None
    if not isinstance(value, str) or len(value.strip()) > MAX_ADDRESS or not value.strip().isprintable():
        raise BadInput("the contact detail is not valid", code="invalid_contact")
    value = value.strip()
    if channel == "email" and not EMAIL.match(value):
        raise BadInput("this is not an e-mail address", code="invalid_contact")
    return channel, value


def set_contact(session: Session, user: User, channel: object, value: object, *, key: str | None,
                now: datetime) -> bool:
    """Store (or with an empty value, delete) one contact detail; True if one is stored now. Flushes."""
    channel, value = _clean(channel, value)
    hold_participant(session, user.id)  # before the first write (database.participant_lock)
    session.execute(delete(ContactDetail).where(ContactDetail.user_id == user.id, ContactDetail.channel == channel))
    if value is None:
        return False
    fernet = cipher(key)
    if fernet is None:
        raise Conflict("reminders by contact details are not set up for this study", code="contacts_disabled")
    session.add(ContactDetail(user_id=user.id, channel=channel, encrypted=fernet.encrypt(value.encode("utf-8")),
                              updated_at=now))
    session.flush()
    return True


def has_contacts(session: Session, user_id: int) -> list[str]:
    return list(session.scalars(select(ContactDetail.channel).where(ContactDetail.user_id == user_id)
                                .order_by(ContactDetail.channel)))


def decrypted_contacts(session: Session, key: str | None) -> dict[tuple[int, str], str]:
    """(user id, channel) -> contact, for the reminder job only. Undecryptable entries are skipped."""
    fernet = cipher(key)
    if fernet is None:
        return {}
    found = {}
    for row in session.scalars(select(ContactDetail)):
        try:
            found[(row.user_id, row.channel)] = fernet.decrypt(row.encrypted).decode("utf-8")
        except InvalidToken:
            continue  # stored under another key; the monitor shows the reminder as without contact
    return found
