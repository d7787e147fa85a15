"""The consent a participant accepted: its exact wording, kept by hash, and the participant's own copy.

The study file holds only the current consent. Each wording participants accept (version, text and
contact, every language) is stored once in ``consent_texts`` under the hash of that wording, and the
account keeps the hash, so a participant's copy shows what they agreed to even after the lab edits the
study file (also when it forgets to change the version).
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from database.models import ConsentText, User
from services.platform.clock import utc_iso
from services.platform.errors import NotFound
from services.study.definition import Consent, Study
from services.study.timer_service import localised


def _wording(consent: Consent) -> dict[str, Any]:
    return {"version": consent.version, "text": dict(consent.text),
            "contact": dict(consent.contact) if consent.contact is not None else None}


def consent_hash(consent: Consent) -> str:
    """SHA-256 of the wording (version, text and contact in every language), in a canonical JSON form."""
    canonical = json.dumps(_wording(consent), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def record_consent(session: Session, user: User, study: Study, now: datetime) -> None:
    """The account accepted the study's current consent: keep its hash and (once) the wording itself."""
    digest = consent_hash(study.consent)
    user.consent_hash = digest
    if session.get(ConsentText, digest) is None:
        wording = _wording(study.consent)
        session.add(ConsentText(text_hash=digest, version=wording["version"], text=wording["text"],
                                contact=wording["contact"], first_accepted_at=now))


def consent_copy(session: Session, user: User, study: Study, language: str | None = None) -> dict[str, Any]:
    """What the participant agreed to and when, in their language (or ``language``).

    ``exact`` is False for an account that enrolled before wordings were kept: its copy is the study's
    current wording of the same version."""
    language = language or user.language
    stored = session.get(ConsentText, user.consent_hash) if user.consent_hash else None
    if stored is not None:
        version, text, contact, exact = stored.version, stored.text, stored.contact, True
    elif user.consent_version == study.consent.version:
        wording = _wording(study.consent)
        version, text, contact, exact = wording["version"], wording["text"], wording["contact"], False
    else:
        raise NotFound(f"the wording of consent version {user.consent_version!r} is not stored",
                       code="consent_text_unknown")
    return {"version": version, "text_hash": user.consent_hash, "exact": exact, "language": language,
            "accepted_at": utc_iso(user.consent_at), "participant_code": user.participant_code,
            "study_name": study.name, "text": localised(text, language),
            "contact": localised(contact, language) if contact else None}
