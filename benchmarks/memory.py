"""Peak resident memory of the process that did the work, and of nothing else.

``ru_maxrss`` is the wrong number for a child: Linux carries the high-water mark of the forking
parent over ``fork`` and ``exec``, so a benchmark parent that holds a corpus in memory makes
every child it starts look as large. ``VmHWM`` in ``/proc/self/status`` belongs to the address
space ``exec`` created, so a fresh interpreter reports only its own peak.
"""

from __future__ import annotations

from pathlib import Path


def own_peak_rss_kib() -> int:
    """This process's peak RSS in kiB, counted from its own ``exec``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no VmHWM line (not Linux?)")
