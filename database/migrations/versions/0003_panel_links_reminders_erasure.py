"""panel ids, return links, encrypted contacts, reminders, erasure tombstones, data-quality signals

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('external_id', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('erased_at', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('erasure_reason', sa.Text(), nullable=True))
        batch_op.create_unique_constraint('uq_users_external_id', ['external_id'])

    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.add_column(sa.Column('typing_ms', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('keystrokes', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('pasted_chars', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('focus_losses', sa.Integer(), nullable=True))

    op.create_table('return_links',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('purpose', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.Column('revoked_at', sa.DateTime(), nullable=True),
    sa.Column('last_used_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    with op.batch_alter_table('return_links', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_return_links_user_id'), ['user_id'], unique=False)

    op.create_table('contact_details',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('channel', sa.String(length=16), nullable=False),
    sa.Column('encrypted', sa.LargeBinary(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('user_id', 'channel', name='uq_contact_channel')
    )
    with op.batch_alter_table('contact_details', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_contact_details_user_id'), ['user_id'], unique=False)

    op.create_table('reminders',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('task_id', sa.String(length=8), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('channel', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('sent_at', sa.DateTime(), nullable=True),
    sa.Column('error', sa.String(length=255), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('user_id', 'task_id', 'kind', 'channel', name='uq_reminder_once')
    )
    with op.batch_alter_table('reminders', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reminders_user_id'), ['user_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('reminders', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_reminders_user_id'))
    op.drop_table('reminders')
    with op.batch_alter_table('contact_details', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_contact_details_user_id'))
    op.drop_table('contact_details')
    with op.batch_alter_table('return_links', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_return_links_user_id'))
    op.drop_table('return_links')
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_column('focus_losses')
        batch_op.drop_column('pasted_chars')
        batch_op.drop_column('keystrokes')
        batch_op.drop_column('typing_ms')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_constraint('uq_users_external_id', type_='unique')
        batch_op.drop_column('erasure_reason')
        batch_op.drop_column('erased_at')
        batch_op.drop_column('external_id')
