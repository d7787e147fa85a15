"""message_input_kind: how a participant's message reached the box (typed, composed, pasted, dictated, unknown)
and the input / composition events counted while writing it, so text from an input method or dictation is
not judged by key presses (issue 28 item 4)

Revision ID: 0018
Revises: 0017
"""
import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('messages') as batch_op:
        batch_op.add_column(sa.Column('input_kind', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('input_events', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('composition_events', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('messages') as batch_op:
        batch_op.drop_column('composition_events')
        batch_op.drop_column('input_events')
        batch_op.drop_column('input_kind')
