"""Panel integrity: panel entries with the panel's session parameters, device cookies, the addresses an
account logged in from, each participant's time zone, and whether a finished task reached the minimum
engagement (issue 18)

Revision ID: 0010
Revises: 0012
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('time_zone', sa.String(length=64), nullable=True))
    with op.batch_alter_table('task_sessions') as batch:
        batch.add_column(sa.Column('outcome', sa.String(length=16), nullable=True))
    op.create_table(
        'panel_entries',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('at', sa.DateTime(), nullable=False),
        sa.Column('outcome', sa.String(length=16), nullable=False),
        sa.Column('via', sa.String(length=16), nullable=True),
        sa.Column('session_params', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_panel_entries_user_id', 'panel_entries', ['user_id'])
    op.create_index('ix_panel_entries_at', 'panel_entries', ['at'])
    op.create_index('ix_panel_entries_outcome', 'panel_entries', ['outcome'])
    op.create_table(
        'panel_devices',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('last_seen_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('user_id', 'token_hash', name='uq_panel_device'),
    )
    op.create_index('ix_panel_devices_user_id', 'panel_devices', ['user_id'])
    op.create_index('ix_panel_devices_token_hash', 'panel_devices', ['token_hash'])
    op.create_table(
        'login_addresses',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('address_hash', sa.String(length=64), nullable=False),
        sa.Column('last_success_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('user_id', 'address_hash', name='uq_login_address'),
    )
    op.create_index('ix_login_addresses_user_id', 'login_addresses', ['user_id'])


def downgrade() -> None:
    op.drop_table('login_addresses')
    op.drop_table('panel_devices')
    op.drop_table('panel_entries')
    with op.batch_alter_table('task_sessions') as batch:
        batch.drop_column('outcome')
    with op.batch_alter_table('users') as batch:
        batch.drop_column('time_zone')
