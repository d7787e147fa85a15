"""provider_failures: which try failed, what followed it and the retry's delay as columns (try_number, action,
retry_in_s) instead of an English "[try N; ...]" prefix on the stored message, so the admin console can say them
in the reader's language (issue 30 item 8). Rows written before are split into the columns and the provider's own
text; downgrade writes the prefix back.

Revision ID: 0024
Revises: 0023
"""
import re

import sqlalchemy as sa
from alembic import op

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None

# what services/platform/failure_log.py wrote before this revision: "[try 2; retried after 0.5 s] <error>",
# "[try 1; fallback] <error>", "[try 3; give_up] <error>", and "[try 1; gave up] <error>" for a try with no action
OLD_PREFIX = re.compile(r"\[try (\d+); (?:retried after (\S+) s|([^\]]*))\] ?")
OLD_WORDS = {"gave up": "give_up"}


def split_old_message(message: str) -> dict | None:
    """The columns and the provider's text of a message with the old prefix; None for one without."""
    match = OLD_PREFIX.match(message or "")
    if match is None:
        return None
    try_number, delay, action = match.groups()
    if delay is not None:
        action, retry_in_s = "retry", (None if delay == "None" else float(delay))
    else:
        action, retry_in_s = OLD_WORDS.get(action, action)[:16] or None, None
    return {"try_number": int(try_number), "action": action, "retry_in_s": retry_in_s,
            "message": message[match.end():]}


def old_message(message: str, try_number: int | None, action: str | None, retry_in_s: float | None) -> str:
    """The message as failure_log.py wrote it before this revision."""
    if action == "retry":
        return f"[try {try_number}; retried after {retry_in_s} s] {message}"
    if try_number:
        return f"[try {try_number}; {action or 'gave up'}] {message}"
    return message


def upgrade() -> None:
    with op.batch_alter_table('provider_failures') as batch_op:
        batch_op.add_column(sa.Column('try_number', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('action', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('retry_in_s', sa.Float(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, message FROM provider_failures WHERE message LIKE '[try %'")).all()
    updates = [{"id": row_id, **split} for row_id, message in rows if (split := split_old_message(message))]
    if updates:
        conn.execute(sa.text("UPDATE provider_failures SET try_number = :try_number, action = :action, "
                             "retry_in_s = :retry_in_s, message = :message WHERE id = :id"), updates)


def downgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, message, try_number, action, retry_in_s FROM provider_failures "
                                "WHERE try_number IS NOT NULL OR action IS NOT NULL")).all()
    updates = [{"id": row_id, "message": old_message(message, try_number, action, retry_in_s)}
               for row_id, message, try_number, action, retry_in_s in rows]
    if updates:
        conn.execute(sa.text("UPDATE provider_failures SET message = :message WHERE id = :id"), updates)
    with op.batch_alter_table('provider_failures') as batch_op:
        batch_op.drop_column('retry_in_s')
        batch_op.drop_column('action')
        batch_op.drop_column('try_number')
