"""recall_events: what recalled a memory (recalled_by: curve, directed or rehearsal) and, for the rehearsal route,
the candidate it was reached through (via_message_id). Since directed retrieval (session 14) a recalled event's
p_final may lie below the threshold, which the export's "1 if p_final reached the threshold" no longer said.

Events written before this revision are filled from their reply's stored memory context: a recalled memory that
the reply's directed-retrieval decision brought back is "directed", any other recalled one "curve" (the rehearsal
route did not exist before); events not recalled stay empty.

Revision ID: 0025
Revises: 0024
"""
import json

import sqlalchemy as sa
from alembic import op

revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def directed_memory(context) -> int | None:
    """The memory a reply's stored context says directed retrieval brought back, if any."""
    if isinstance(context, str):
        try:
            context = json.loads(context)
        except ValueError:
            return None
    if not isinstance(context, dict):
        return None
    decision = ((context.get("recall_params") or {}).get("directed_retrieval") or {}).get("decision") or {}
    return decision.get("message_id") if decision.get("recalled") else None


def upgrade() -> None:
    with op.batch_alter_table('recall_events') as batch_op:
        batch_op.add_column(sa.Column('recalled_by', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('via_message_id', sa.Integer(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text(
        "SELECT e.id, e.memory_message_id, r.memory_context FROM recall_events e "
        "LEFT JOIN messages r ON r.reply_to_id = e.query_message_id WHERE e.recalled = :yes"), {"yes": True}).all()
    updates = [{"id": event_id, "by": "directed" if directed_memory(context) == memory_id else "curve"}
               for event_id, memory_id, context in rows]
    if updates:
        conn.execute(sa.text("UPDATE recall_events SET recalled_by = :by WHERE id = :id"), updates)


def downgrade() -> None:
    with op.batch_alter_table('recall_events') as batch_op:
        batch_op.drop_column('via_message_id')
        batch_op.drop_column('recalled_by')
