"""assignment_counter (slots taken under a row lock), messages.idempotency_key (a resent message is
stored once) and consolidation_runs.heartbeat_at (a live run renews its lease)

Revision ID: 0012
Revises: 0015
"""
import json

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    counter = op.create_table(
        'assignment_counter',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('next_slot', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.bulk_insert(counter, [{'id': 1, 'next_slot': _after_last_slot()}])
    with op.batch_alter_table('messages') as batch:
        batch.add_column(sa.Column('idempotency_key', sa.String(length=128), nullable=True))
        batch.create_unique_constraint('uq_messages_user_idempotency_key', ['user_id', 'idempotency_key'])
    with op.batch_alter_table('consolidation_runs') as batch:
        batch.add_column(sa.Column('heartbeat_at', sa.DateTime(), nullable=True))


def _after_last_slot() -> int:
    """The running slot number after the last one drawn (slots count on across blocks of
    ``len(block_sequence)``), so no drawn slot is handed out again."""
    last = op.get_bind().execute(sa.text(
        "SELECT block_index, slot_index, block_sequence FROM assignments "
        "ORDER BY block_index DESC, slot_index DESC LIMIT 1")).first()
    if last is None:
        return 0
    sequence = json.loads(last.block_sequence) if isinstance(last.block_sequence, str) else last.block_sequence
    return last.block_index * len(sequence) + last.slot_index + 1


def downgrade() -> None:
    with op.batch_alter_table('consolidation_runs') as batch:
        batch.drop_column('heartbeat_at')
    with op.batch_alter_table('messages') as batch:
        batch.drop_constraint('uq_messages_user_idempotency_key', type_='unique')
        batch.drop_column('idempotency_key')
    op.drop_table('assignment_counter')
