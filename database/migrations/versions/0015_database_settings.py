"""database_settings: facts a deployment records with its data, such as the study's time scale

Revision ID: 0015
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'database_settings',
        sa.Column('key', sa.String(length=64), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('key'),
    )


def downgrade() -> None:
    op.drop_table('database_settings')
