"""reminders.claimed_at: when the current send attempt started, so an attempt a crash interrupted is noticed

Revision ID: 0007
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('reminders') as batch:
        batch.add_column(sa.Column('claimed_at', sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('reminders') as batch:
        batch.drop_column('claimed_at')
