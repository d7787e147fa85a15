"""The two-host run's ports on 127.0.0.1 (scripts/load_bots/stack.py) and the small helpers its processes need."""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass


@dataclass
class Ports:
    """Defaults: the ports this project's two-host run was given (PostgreSQL 25511, the apps 181xx)."""

    postgres: int = 25511
    pgbouncer: int = 25512
    balancer: int = 18100
    stats: int = 18190
    apps: tuple[int, ...] = (18101, 18102)


def as_postgres(command: list[str]) -> list[str]:
    """pgbouncer and PostgreSQL refuse to run as root: as the 'postgres' user the Debian package creates."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def http_status(url: str, timeout: float = 2.0) -> int:
    """The status a GET answers with (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0
