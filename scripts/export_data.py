"""Export the study data as a zip: CSV files (long and wide), codebook, study definition.

    python scripts/export_data.py --out exports/study.zip [--bom] [--exclude-pii] [--no-escape-formulas]
                                  [--database-url URL]

``--bom`` writes UTF-8 with a byte-order mark so Excel opens Chinese text correctly;
``--exclude-pii`` leaves out usernames and every free-text column; CSV cells starting with
= + - @ get a leading apostrophe so spreadsheets do not run them as formulas, unless
``--no-escape-formulas``. The database is
DATABASE_URL (default: the SQLite file under data/). Also available as
``flask --app app export --out FILE.zip``. What each file and column holds: the
codebook.md inside the zip.
"""
from __future__ import annotations

import argparse

from config import Settings
from database.db_manager import Database
from services.hosting.runtime import Runtime
from services.platform.background import BackgroundRunner
from services.platform.clock import Clock
from services.reporting.export_service import ExportOptions, write_export


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="zip file to write")
    parser.add_argument("--bom", action="store_true", help="UTF-8 with byte-order mark (Excel)")
    parser.add_argument("--exclude-pii", action="store_true", help="leave out usernames and free-text columns")
    parser.add_argument("--no-escape-formulas", action="store_true",
                        help="keep CSV cells starting with = + - @ as they are (escaped with ' by default)")
    parser.add_argument("--database-url", help="database to export (default: DATABASE_URL or data/experiment.db)")
    args = parser.parse_args(argv)
    overrides = {"database_url": args.database_url} if args.database_url else {}
    settings = Settings.from_env(**overrides)
    # Exporting needs the database and the study definition only, not the model providers.
    runtime = Runtime(settings=settings, db=Database(settings.database_url), clock=Clock(),
                      background=BackgroundRunner(inline=True))
    try:
        options = ExportOptions(bom=args.bom, exclude_pii=args.exclude_pii,
                                escape_formulas=not args.no_escape_formulas)
        result = write_export(runtime, args.out, options=options, channel="script")
    finally:
        runtime.db.dispose()
    print(f"wrote {args.out} ({len(result.data) / 1024:.0f} KiB)")
    for name, rows in result.files.items():
        print(f"  {name:26s} {rows:>7} {'rows' if name.endswith(('.csv', '.jsonl')) else 'file'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
