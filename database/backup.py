"""Consistent copies of the study database while the app keeps running, and their restore.

SQLite: the online backup API (``sqlite3.Connection.backup``) copies page by page under the
database's own locking, so the copy is consistent even while participants are writing; copying the
file by hand could catch a half-written transaction or miss the WAL.
PostgreSQL: ``pg_dump --format=custom`` (a consistent snapshot), restored with ``pg_restore``.
"""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

# Debian installs the PostgreSQL client programs per major version, off the PATH.
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise ValueError("an in-memory SQLite database cannot be backed up")
    return Path(database)


def postgres_tool(name: str) -> str:
    """The newest installed ``pg_dump``/``pg_restore`` (a dump must not come from an older client)."""
    candidates = sorted(Path("/").glob(POSTGRES_BIN_GLOB.lstrip("/")),
                        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    for directory in reversed(candidates):
        if (directory / name).exists():
            return str(directory / name)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (Debian: apt-get install postgresql-client)")
    return found


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq understands it (no ``+psycopg`` driver suffix)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def backup(url: str, out: Path) -> Path:
    """Write a consistent copy of the database at ``url`` to ``out`` (which must not exist yet)."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; backups are never overwritten")
    out.parent.mkdir(parents=True, exist_ok=True)
    if is_sqlite(url):
        _sqlite_copy(sqlite_path(url), out)
    else:
        subprocess.run([postgres_tool("pg_dump"), "--format=custom", "--no-owner", "--file", str(out),
                        "--dbname", libpq_url(url)], check=True, capture_output=True, text=True)
    return out


def restore(backup_file: Path, url: str) -> None:
    """Restore ``backup_file`` into the database at ``url``, which must be new and empty."""
    backup_file = Path(backup_file)
    if not backup_file.exists():
        raise FileNotFoundError(f"no backup at {backup_file}")
    if is_sqlite(url):
        target = sqlite_path(url)
        if target.exists() and target.stat().st_size > 0:
            raise FileExistsError(f"{target} exists; restore into a new file, then swap it in while the app is stopped")
        target.parent.mkdir(parents=True, exist_ok=True)
        _sqlite_copy(backup_file, target)
    else:
        subprocess.run([postgres_tool("pg_restore"), "--no-owner", "--exit-on-error", "--dbname", libpq_url(url),
                        str(backup_file)], check=True, capture_output=True, text=True)


def _sqlite_copy(source: Path, target: Path) -> None:
    if not source.exists():
        raise FileNotFoundError(f"no SQLite database at {source}")
    src = sqlite3.connect(source)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
