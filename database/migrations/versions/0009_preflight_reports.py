"""preflight_reports: the manipulation proven before recruiting (flask --app app preflight)

Revision ID: 0009
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'preflight_reports',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('study_hash', sa.String(length=64), nullable=False),
        sa.Column('passed', sa.Boolean(), nullable=False),
        sa.Column('embedder_model', sa.String(length=255), nullable=True),
        sa.Column('chat_model', sa.String(length=255), nullable=True),
        sa.Column('providers', sa.JSON(), nullable=False),
        sa.Column('checks', sa.JSON(), nullable=False),
        sa.Column('duration_seconds', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_preflight_reports_created_at', 'preflight_reports', ['created_at'])
    op.create_index('ix_preflight_reports_study_hash', 'preflight_reports', ['study_hash'])


def downgrade() -> None:
    op.drop_index('ix_preflight_reports_study_hash', table_name='preflight_reports')
    op.drop_index('ix_preflight_reports_created_at', table_name='preflight_reports')
    op.drop_table('preflight_reports')
