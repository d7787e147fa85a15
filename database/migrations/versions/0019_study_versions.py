"""study_versions, study_drafts, demo_links; the study version on users and task_sessions; the questionnaire order

Revision ID: 0019
Revises: 0018
"""
import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'study_versions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('study_hash', sa.String(length=64), nullable=False),
        sa.Column('definition', sa.JSON(), nullable=False),
        sa.Column('source', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('created_by', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('draft_id', sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('version'),
    )
    op.create_index('ix_study_versions_study_hash', 'study_versions', ['study_hash'])
    op.create_table(
        'study_drafts',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('definition', sa.JSON(), nullable=False),
        sa.Column('study_hash', sa.String(length=64), nullable=False),
        sa.Column('based_on_version', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('created_by', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('published_version', sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_table(
        'demo_links',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('condition', sa.String(length=8), nullable=False),
        sa.Column('language', sa.String(length=8), nullable=False),
        sa.Column('label', sa.String(length=200), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('created_by', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('expires_at', sa.DateTime(), nullable=False),
        sa.Column('revoked_at', sa.DateTime(), nullable=True),
        sa.Column('opened', sa.Integer(), nullable=False, server_default='0'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_hash'),
    )
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('study_version', sa.Integer(), nullable=True))
    with op.batch_alter_table('task_sessions') as batch:
        batch.add_column(sa.Column('study_version', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('questionnaire_order', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('task_sessions') as batch:
        batch.drop_column('questionnaire_order')
        batch.drop_column('study_version')
    with op.batch_alter_table('users') as batch:
        batch.drop_column('study_version')
    op.drop_table('demo_links')
    op.drop_table('study_drafts')
    op.drop_index('ix_study_versions_study_hash', table_name='study_versions')
    op.drop_table('study_versions')
