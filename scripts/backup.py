"""Back up the study database while the app runs, or restore a backup into a new database.

    python scripts/backup.py create [--out backups/experiment-YYYYmmdd-HHMMSS.db] [--database-url URL]
    python scripts/backup.py restore BACKUP_FILE --database-url URL

SQLite uses the online backup API (a consistent copy, even while participants write); PostgreSQL
uses pg_dump --format=custom and pg_restore. The database is DATABASE_URL (default: the SQLite
file under data/). ``restore`` only writes into a new, empty database: swap it in while the app is
stopped. Backups are never overwritten.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from config import BASE_DIR, Settings
from database.backup import backup, is_sqlite, restore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="write a consistent backup of the database")
    create.add_argument("--out", help="backup file to write (default: backups/experiment-<UTC time>.db|.dump)")
    create.add_argument("--database-url", help="database to back up (default: DATABASE_URL or data/experiment.db)")
    back = commands.add_parser("restore", help="restore a backup into a new, empty database")
    back.add_argument("backup_file")
    back.add_argument("--database-url", required=True, help="the new database to restore into")
    args = parser.parse_args(argv)
    url = args.database_url or Settings.from_env().database_url
    try:
        if args.command == "create":
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
            out = Path(args.out or BASE_DIR / "backups" / f"experiment-{stamp}.{'db' if is_sqlite(url) else 'dump'}")
            print(f"backed up to {backup(url, out)} ({out.stat().st_size / 1024:.0f} KiB)")
        else:
            restore(Path(args.backup_file), url)
            print(f"restored {args.backup_file} into {url.split('@')[-1]}")
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"error: {Path(exc.cmd[0]).name} failed:\n{exc.stderr}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
