"""participant rights: who withdrew (participant or admin), and the consent wording each participant accepted

Revision ID: 0011
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'consent_texts',
        sa.Column('text_hash', sa.String(length=64), nullable=False),
        sa.Column('version', sa.String(length=32), nullable=False),
        sa.Column('text', sa.JSON(), nullable=False),
        sa.Column('contact', sa.JSON(), nullable=True),
        sa.Column('first_accepted_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('text_hash'),
    )
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('consent_hash', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('withdrawn_by', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.drop_column('withdrawn_by')
        batch.drop_column('consent_hash')
    op.drop_table('consent_texts')
