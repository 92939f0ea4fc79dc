"""A bounded map of values each kept with the version of the data it was made from.

The plugin keeps what it derived from a run (a listing, a merged health matrix, a document) between
requests, each under the version of the data it came from; a lookup with another version misses, so
new data is never hidden. The least recently used entries go first.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Hashable, Optional


class VersionedCache:
    def __init__(self, size: int):
        self._size = size
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, version: Hashable) -> Optional[Any]:
        """The value kept for ``key`` if it was made from ``version``, else None."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0] != version:
                return None
            self._entries.move_to_end(key)
            return hit[1]

    def put(self, key: Hashable, version: Hashable, value: Any) -> None:
        with self._lock:
            self._entries[key] = (version, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
