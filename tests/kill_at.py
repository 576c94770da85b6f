"""For the crash tests' child processes: SIGKILL this process at one call of a function, before or after it runs."""

from __future__ import annotations

import os
import signal
from typing import Any


def kill_at(holder: Any, name: str, nth: int, when: str) -> list[int]:
    """Replace `holder.name` by a wrapper that kills the process at its `nth` call (`when`: before | after);
    the returned one-item list counts the calls."""
    real, seen = getattr(holder, name), [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        if seen[0] == nth and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        out = real(*args, **kwargs)
        if seen[0] == nth and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    setattr(holder, name, wrapped)
    return seen
