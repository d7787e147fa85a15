"""What an erasure keeps so the same person cannot come back as a new, naive participant.

An erased account keeps no panel id and no username in clear, only a keyed hash of each: HMAC-SHA256
under a key derived from ``SECRET_KEY`` (``tombstone_key``), so the tombstone alone (a backup, an export of
the table) cannot be matched against a list of panel ids without the server's secret, while the server
can refuse that id or name at the door. Changing ``SECRET_KEY`` forgets these refusals (README, Erasure).
"""
from __future__ import annotations

import hashlib
import hmac

from database.models import username_key

_KEY_LABEL = b"memory-lab tombstone v1"


def tombstone_key(secret: str) -> bytes:
    """The tombstone's own key, derived from SECRET_KEY (never the secret itself)."""
    return hmac.new(secret.encode("utf-8"), _KEY_LABEL, hashlib.sha256).digest()


def tombstone_hash(secret: str, kind: str, value: str) -> str:
    """The keyed hash of a panel id (``kind`` "panel_id") or a username ("username"), in the form ids and
    names are compared in (``username_key``: case and width do not matter)."""
    message = f"{kind}:{username_key(value)}".encode()
    return hmac.new(tombstone_key(secret), message, hashlib.sha256).hexdigest()
