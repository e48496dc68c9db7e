"""Bounded per-process memos of pure functions of exact input bytes.

``tenant fetch --expected`` verifies thousands of distinct envelopes that carry one chip's
certificate chain: what follows from those bytes alone (their parse, the path they form to a
pinned root, an RSA signature between two of them) is the same every time, so it is computed
once per process. The rules every memo here follows:

* the key is the exact input bytes (or DER bytes ``cryptography`` re-encodes a certificate to,
  which are the bytes its signature is verified over), plus the identity of anything else the
  value depends on, itself as bytes (a pinned root's DER);
* only successes are kept: a failure is recomputed, and its message rebuilt, every time;
* nothing that depends on time (validity windows, CRL freshness) is kept: the callers check it
  against ``now`` at every call, memo hit or not;
* the size is bounded, whatever the input: at most ``limit`` entries (least recently used out
  first), each remembered only when the input bytes it stands for are at most
  :data:`MAX_REMEMBERED_INPUT_BYTES` (a certChain of AMD's three certificates is about 6 KB of
  PEM; a larger input, such as an envelope's certChain padded to megabytes by a hostile
  operator, is judged from scratch at every call and never held).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")
#: The most input bytes one entry may stand for (the key's bytes and what the value holds).
MAX_REMEMBERED_INPUT_BYTES = 64 * 1024
#: How to empty every memo made, for :func:`forget_all`.
_CLEARS: list[Callable[[], None]] = []


class BoundedMemo(Generic[_K, _V]):
    """A least-recently-used map of at most ``limit`` entries, safe to share between threads
    (the tenant's fetch verifies in a worker pool). ``forget_with_all=False``: a memo of what
    pinned certificates alone give, which :func:`forget_all` keeps (a new chip, not a new
    process)."""

    def __init__(self, limit: int, *, forget_with_all: bool = True) -> None:
        if limit < 1:
            raise ValueError(f"a memo holds at least one entry, not {limit}")
        self._limit = limit
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()
        if forget_with_all:
            _CLEARS.append(self.clear)

    @property
    def limit(self) -> int:
        return self._limit

    def get(self, key: _K) -> _V | None:
        """The value remembered for ``key``, or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: _K, value: _V, *, input_bytes: int) -> None:
        """Remember ``value`` (a success) for ``key``, which stands for ``input_bytes`` bytes of
        input, dropping the least recently used entry beyond the limit; an entry for more than
        :data:`MAX_REMEMBERED_INPUT_BYTES` is not remembered."""
        if input_bytes > MAX_REMEMBERED_INPUT_BYTES:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


def forget_all() -> None:
    """Empty every memo (what the first verification in a new process starts from)."""
    for clear in _CLEARS:
        clear()
