"""races settled by the database, and session versions

- users.username_key: the NFKC case-folded username, unique (``Name`` and ``name`` are one account)
- users.session_version: raised by logout and password changes to end older sessions
- messages.reply_to_id unique: one reply per message, even when retries race
- task_sessions: one attempt that counts (status != 'reset') per participant and task

Existing duplicates are not dropped silently: the upgrade stops and names them, so the
researcher decides which row to keep.

Revision ID: 0002
Revises: 0001
"""
import unicodedata
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def _username_key(username: str) -> str:
    # the same rule as database.models.username_key, frozen here as the migration's own copy
    return unicodedata.normalize("NFKC", username.strip()).casefold()


class DuplicateRows(RuntimeError):
    pass


def _fail_on_duplicates(conn) -> dict[int, str]:
    keys: dict[int, str] = {}
    owners: dict[str, list[str]] = defaultdict(list)
    for user_id, username in conn.execute(sa.text("SELECT id, username FROM users ORDER BY id")):
        keys[user_id] = _username_key(username)
        owners[keys[user_id]].append(f"{username!r} (id {user_id})")
    problems = [f"usernames that differ only in case or width: {', '.join(names)}"
                for names in owners.values() if len(names) > 1]
    for reply_to_id, count in conn.execute(sa.text(
            "SELECT reply_to_id, COUNT(*) FROM messages WHERE reply_to_id IS NOT NULL "
            "GROUP BY reply_to_id HAVING COUNT(*) > 1")):
        problems.append(f"message {reply_to_id} has {count} replies")
    for user_id, task_id, count in conn.execute(sa.text(
            "SELECT user_id, task_id, COUNT(*) FROM task_sessions WHERE status != 'reset' "
            "GROUP BY user_id, task_id HAVING COUNT(*) > 1")):
        problems.append(f"user {user_id} has {count} attempts at {task_id} not marked reset")
    if problems:
        raise DuplicateRows(
            "revision 0002 adds unique constraints, and these rows break them; nothing was changed. "
            "Decide which row to keep (rename the account, or mark the extra attempt 'reset'), then migrate "
            "again:\n  " + "\n  ".join(problems))
    return keys


def upgrade() -> None:
    conn = op.get_bind()
    keys = _fail_on_duplicates(conn)
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('username_key', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('session_version', sa.Integer(), nullable=False, server_default='0'))
    for user_id, key in keys.items():
        conn.execute(sa.text("UPDATE users SET username_key = :key WHERE id = :id"), {"key": key, "id": user_id})
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.alter_column('username_key', existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column('session_version', existing_type=sa.Integer(), server_default=None)
        batch_op.create_unique_constraint('uq_users_username_key', ['username_key'])
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.create_unique_constraint('uq_messages_reply_to_id', ['reply_to_id'])
    with op.batch_alter_table('task_sessions', schema=None) as batch_op:
        batch_op.create_index('uq_task_live_attempt', ['user_id', 'task_id'], unique=True,
                              sqlite_where=sa.text("status != 'reset'"),
                              postgresql_where=sa.text("status != 'reset'"))


def downgrade() -> None:
    with op.batch_alter_table('task_sessions', schema=None) as batch_op:
        batch_op.drop_index('uq_task_live_attempt')
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_constraint('uq_messages_reply_to_id', type_='unique')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_constraint('uq_users_username_key', type_='unique')
        batch_op.drop_column('session_version')
        batch_op.drop_column('username_key')
