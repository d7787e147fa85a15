"""messages: reply timing and pacing (model_first_token_ms, model_total_ms, pacing_delay_ms,
visible_first_token_ms) and memory_exposure (how much of the earlier tasks a reply's context carried)

Revision ID: 0016
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0009'
branch_labels = None
depends_on = None

TIMING = ('model_first_token_ms', 'model_total_ms', 'pacing_delay_ms', 'visible_first_token_ms')


def upgrade() -> None:
    with op.batch_alter_table('messages') as batch:
        for name in TIMING:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch.add_column(sa.Column('memory_exposure', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('messages') as batch:
        batch.drop_column('memory_exposure')
        for name in reversed(TIMING):
            batch.drop_column(name)
