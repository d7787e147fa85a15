"""integrity II (issue 28): keyed hashes in the erasure tombstone, message content flags, device bindings by link

Revision ID: 0017
Revises: 0016
"""
import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('erased_id_hash', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('erased_name_hash', sa.String(length=64), nullable=True))
        batch.create_index('ix_users_erased_id_hash', ['erased_id_hash'])
        batch.create_index('ix_users_erased_name_hash', ['erased_name_hash'])
    with op.batch_alter_table('messages') as batch:
        batch.add_column(sa.Column('content_flags', sa.JSON(), nullable=True))
    with op.batch_alter_table('panel_devices') as batch:
        batch.add_column(sa.Column('return_link_id', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('panel_devices') as batch:
        batch.drop_column('return_link_id')
    with op.batch_alter_table('messages') as batch:
        batch.drop_column('content_flags')
    with op.batch_alter_table('users') as batch:
        batch.drop_index('ix_users_erased_name_hash')
        batch.drop_index('ix_users_erased_id_hash')
        batch.drop_column('erased_name_hash')
        batch.drop_column('erased_id_hash')
