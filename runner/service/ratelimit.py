"""Token-bucket request rate limits, keyed by bearer token (and by client address for
failed authentications)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

#: Buckets kept at most; the least recently used is dropped first (a full bucket again).
MAX_BUCKETS: Final = 100_000
_UNITS: Final = {"s": 1.0, "min": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Rate:
    """``per_second`` requests on average, in bursts of up to ``burst``."""

    per_second: float
    burst: float

    @classmethod
    def parse(cls, text: str) -> Rate | None:
        """``"2000/s"``, ``"120/min"``, ``"10000/h"`` or ``"0"`` (no limit: None).

        Raises:
            ValueError: naming the accepted forms.
        """
        if text.strip() == "0":
            return None
        count, _, unit = text.strip().partition("/")
        seconds = _UNITS.get(unit.strip())
        try:
            amount = float(count)
        except ValueError:
            amount = math.nan
        if seconds is None or not math.isfinite(amount) or amount <= 0:
            raise ValueError(f"{text!r} is not a rate: write N/s, N/min or N/h, or 0 for none")
        per_second = amount / seconds
        return cls(per_second=per_second, burst=max(1.0, 2 * per_second))


class RateLimiter:
    """Thread-safe token buckets; :meth:`acquire` answers 0 or the seconds to wait."""

    def __init__(self, rate: Rate, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, key: str) -> float:
        now = self._clock()
        with self._lock:
            tokens, stamp = self._buckets.pop(key, (self.rate.burst, now))
            tokens = min(self.rate.burst, tokens + (now - stamp) * self.rate.per_second)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self.rate.per_second
            self._buckets[key] = (tokens, now)
            if len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
            return wait
