"""Apply database migrations (Alembic) to DATABASE_URL (default: SQLite under data/).

    python scripts/migrate.py            # upgrade to the newest revision
    python scripts/migrate.py --revision 0001
    python scripts/migrate.py --current  # print the database's revision
Also available as ``flask --app app db-upgrade``.
"""
from __future__ import annotations

import argparse
import sys

from config import Settings
from database.db_manager import Database
from services.study.definition import StudyDefinitionError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revision", default="head")
    parser.add_argument("--current", action="store_true", help="only print the current revision")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()  # loads and validates the study: `make run` stops here on a bad one
    except StudyDefinitionError as exc:
        print(f"study definition refused: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a setting that cannot work, e.g. reminders without PUBLIC_BASE_URL
        print(f"configuration refused: {exc}", file=sys.stderr)
        return 2
    db = Database(settings.database_url)
    if not args.current:
        db.upgrade(args.revision)
    print(f"database {db.engine.url.render_as_string(hide_password=True)} at revision {db.current_revision()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
