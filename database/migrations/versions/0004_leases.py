"""leases: named expiring claims shared by every process (scheduler leadership, per-participant guard)

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'leases',
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('holder', sa.String(length=128), nullable=False),
        sa.Column('acquired_at', sa.DateTime(), nullable=False),
        sa.Column('expires_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    op.create_index('ix_leases_expires_at', 'leases', ['expires_at'])


def downgrade() -> None:
    op.drop_index('ix_leases_expires_at', table_name='leases')
    op.drop_table('leases')
