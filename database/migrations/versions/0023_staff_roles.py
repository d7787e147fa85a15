"""lab staff: a role per staff account, disabling, a TOTP second factor, and one-time invitation/reset links

Revision ID: 0023
Revises: 0016
"""
import sqlalchemy as sa
from alembic import op

revision = '0023'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('staff_role', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('disabled_at', sa.DateTime(), nullable=True))
        batch.add_column(sa.Column('totp_secret', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('totp_enabled_at', sa.DateTime(), nullable=True))
    # every admin from before roles could do everything: they become owners
    op.execute("UPDATE users SET staff_role = 'owner' WHERE role = 'admin'")
    op.create_table(
        'staff_tokens',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('username', sa.String(length=64), nullable=False),
        sa.Column('staff_role', sa.String(length=16), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('created_by', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('expires_at', sa.DateTime(), nullable=False),
        sa.Column('used_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(['created_by'], ['users.id']),
        sa.ForeignKeyConstraint(['user_id'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_hash'),
    )


def downgrade() -> None:
    op.drop_table('staff_tokens')
    with op.batch_alter_table('users') as batch:
        batch.drop_column('totp_enabled_at')
        batch.drop_column('totp_secret')
        batch.drop_column('disabled_at')
        batch.drop_column('staff_role')
