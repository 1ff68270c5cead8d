"""Which requests go to the challenger, and which champion requests are copied to it: exact shares.

A random draw per request gives the right share only on average (over 10,000 requests at 50 % its
standard deviation is half a percentage point, so one run in twenty-two strays by more than one point);
a replica share is coarser still. Here the share is counted, not drawn:

- without a routing key, an accumulator (Bresenham's line algorithm over requests): each request adds
  ``percent`` credit, and a request that brings the credit to 100 goes to the challenger and spends it.
  Over any N consecutive requests the challenger gets ``floor((c + N * percent) / 100)`` of them for a
  starting credit ``0 <= c < 100``: within one request of ``N * percent / 100``, in every process, so
  exact over any number of processes and replicas too;
- with a routing key (``contract.ROUTING_KEY_HEADER``), a stable hash of the key (BLAKE2b, not Python's
  ``hash``, which is salted per process) picks one of 10,000 buckets, and buckets below
  ``percent * 100`` go to the challenger: the same key gets the same version on every replica and after
  every restart, as long as the split stays where it is (and stays with the challenger as it grows).
"""

from __future__ import annotations

import hashlib
from typing import Final

KEY_BUCKETS: Final = 10_000


def key_bucket(key: str) -> int:
    """The key's bucket, 0..9999, the same in every process."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % KEY_BUCKETS


class Share:
    """``percent`` in every 100 calls of ``take``, exactly (see the module's docstring)."""

    __slots__ = ("_credit", "percent")

    def __init__(self, percent: int = 0) -> None:
        self.percent = percent
        self._credit = 0

    def take(self) -> bool:
        self._credit += self.percent
        if self._credit >= 100:
            self._credit -= 100
            return True
        return False

    def takes_key(self, key: str) -> bool:
        return key_bucket(key) < self.percent * (KEY_BUCKETS // 100)
