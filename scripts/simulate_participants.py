"""Bot participants: check the memory manipulation before recruiting anyone.

    python scripts/simulate_participants.py --per-group 3 [--language zh|en|both] [--day-seconds 10]
    python scripts/simulate_participants.py --per-group 2 --base-url http://127.0.0.1:8000 \\
        --admin-user admin --admin-password ...

N scripted participants per enabled memory group and language walk register -> T1 ... T4 through the
HTTP API, plant facts in T1 and probe for them in T2-T4; an admin account then reads every probe reply's
stored memory context and the script prints the manipulation-check report (what the bots plant and ask,
and what each condition is expected to hold: ``services/research/simulation.py``'s docstring). The report gives
each language's figures apart. Exit code 0 when every check
passes; 1 when one fails (a bot that could not walk T1-T4 is a failed check), naming the
failed checks on stderr; 2 when the run itself could not happen (no server, not pilot mode).

Assignment is by permuted blocks the bots cannot choose, so they register in whole blocks
until every enabled group holds N per language; the extra registrations of the last block
are withdrawn by the admin before anyone starts (the report says how many).

Without ``--base-url`` the script starts its own server: the real app on a fresh
temporary SQLite database, offline providers (``--providers env``: the environment's), pilot mode with one study day =
``--day-seconds`` real seconds (T4 unlocks 16 days = 160 s after T1 at the
default 10 s). Task durations are stretched so the bots' chats are not cut off
by the compressed timer (the report says by how much). With ``--base-url`` the
server must be in pilot mode and an admin account is needed to read contexts.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from app import create_app
from config import Settings
from services.research.bots.client import ApiError
from services.research.simulation import failed_checks, format_report, run_simulation


def _settings(providers: str) -> Settings:
    """This environment's settings (its STUDY_CONFIG always), with the offline providers unless told otherwise."""
    if providers == "env":
        return Settings.from_env()
    return Settings.from_env(llm_providers=["offline"], consolidation_providers=None, embedding_provider="offline")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-group", type=int, required=True,
                        help="bots per enabled memory group and language (--language both: N in Chinese and N in "
                        "English per group); they register in whole assignment blocks, extras are withdrawn")
    parser.add_argument("--base-url", help="run against this server instead of a temporary one")
    parser.add_argument("--language", choices=("zh", "en", "both"), default="both")
    parser.add_argument("--day-seconds", type=float, default=10.0,
                        help="pilot day length of the temporary server (default 10 s: shorter days let the "
                        "wait for consolidation age the memories by days on a busy machine)")
    parser.add_argument("--admin-user", default="admin", help="with --base-url: an admin account")
    parser.add_argument("--admin-password", default=os.environ.get("ADMIN_PASSWORD"),
                        help="with --base-url (default: $ADMIN_PASSWORD)")
    parser.add_argument("--conditions", help="temporary server only: comma-separated conditions to assign "
                        "(default: all the study defines, e.g. L1,L2,L3,L4,S1,R1)")
    parser.add_argument("--providers", choices=("offline", "env"), default="offline",
                        help="temporary server only: the offline providers (default) or the ones the environment "
                        "configures (LLM_PROVIDERS, CONSOLIDATION_PROVIDERS, EMBEDDING_PROVIDER)")
    parser.add_argument("--json-out", help="also write the full report as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = run_simulation(per_group=args.per_group, language=args.language, day_seconds=args.day_seconds,
                                base_url=args.base_url, admin_user=args.admin_user,
                                admin_password=args.admin_password,
                                conditions=args.conditions.split(",") if args.conditions else None,
                                log=lambda text: print(text, flush=True), make_app=create_app,
                                settings=_settings(args.providers))
    except (ApiError, RuntimeError, ValueError, OSError) as exc:  # OSError: unreachable server, timeouts
        print(f"simulation failed: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    failed = failed_checks(report)
    if failed:
        print("manipulation check FAILED: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
