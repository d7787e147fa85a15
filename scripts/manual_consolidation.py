"""Consolidate finished tasks by hand (profile, per-message memory fields, R1 memory).

    python scripts/manual_consolidation.py --all-pending
    python scripts/manual_consolidation.py --user alice            # username or numeric id
    python scripts/manual_consolidation.py --user 12 --dry-run     # print what would change, write nothing

Uses DATABASE_URL and the provider settings of the environment (CONSOLIDATION_PROVIDERS,
else LLM_PROVIDERS; EMBEDDING_PROVIDER). Sessions already consolidated are skipped, so
running it again changes nothing. Also available as ``flask --app app consolidate``.
Exit status 1 when any consolidation failed.
"""
from __future__ import annotations

import argparse
import sys

from config import Settings
from database.db_manager import Database
from services.memory.consolidation_service import ConsolidationService, describe, manual_consolidation
from services.platform.clock import Clock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--user", help="a participant's username or id: consolidate their pending tasks")
    which.add_argument("--all-pending", action="store_true", help="every finished task not yet consolidated")
    parser.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    db = Database(settings.database_url)
    try:
        service = ConsolidationService(db, settings, clock=Clock())
        try:
            summaries = manual_consolidation(service, user=args.user, all_pending=args.all_pending,
                                             dry_run=args.dry_run)
        except LookupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if not summaries:
            print("nothing to consolidate")
        for summary in summaries:
            print(describe(summary))
        if args.dry_run and summaries:
            print("dry run: nothing was written")
        return 1 if any(s.status == "failed" for s in summaries) else 0
    finally:
        db.dispose()


if __name__ == "__main__":
    raise SystemExit(main())
