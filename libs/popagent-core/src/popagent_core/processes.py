"""Facts about other processes of this machine."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user, which may not be signalled, counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
