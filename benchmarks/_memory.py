"""Peak-memory helpers that the benchmarks' child processes share."""

from __future__ import annotations

import json
import os
import threading
import time


def status_kib(field: str) -> int:
    """A memory field of /proc/self/status (`VmRSS`, `VmHWM`), in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def watchdog(limit_bytes: float) -> None:
    """Ends this process (exit 3) as soon as its RSS passes `limit_bytes`."""

    def watch():
        while True:
            rss = status_kib("VmRSS") * 1024
            if rss > limit_bytes:
                print(json.dumps({"over_limit": True, "rss_bytes": rss}), flush=True)
                os._exit(3)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
