"""Events correlated as client-go's EventCorrelator does, before they are sent.

An Evaluation that keeps failing the same way would otherwise leave a new Event object at
every decision, and the API server keeps each for an hour. Three steps, client-go's, in its
order and with its numbers:

1. a per-object spam filter: a token bucket of 25 Events, refilled by one every 5 minutes;
   an Event over it is dropped (the caller counts it);
2. an aggregator: once 10 different messages for one (object, type, reason) are seen within
   10 minutes, each further one is sent as "(combined from similar events): <message>",
   counted on one Event of its own;
3. a deduplicator: an Event equal to one sent within 10 minutes (object, type, reason,
   message) is sent as an update of that Event, its `count` and `lastTimestamp` raised,
   not as a new one.

An Event's name is fixed at its first occurrence (`<object>.<hash of its key and first
time>`), so an update needs no answer from the create before it. Each step keeps at most
CACHE_SIZE keys, least recently used out first (client-go's LRU size), so memory is bounded
whatever the Events say.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

CACHE_SIZE = 4096
BURST = 25
REFILL_SECONDS = 300.0
"""One more Event per object every 5 minutes once the burst is spent."""
SIMILAR_LIMIT = 10
"""Different messages for one (object, type, reason) within WINDOW_SECONDS before they are combined."""
WINDOW_SECONDS = 600.0
COMBINED_PREFIX = "(combined from similar events): "
MESSAGE_LIMIT = 1024
"""Characters of a message kept (the API server refuses longer ones in some versions)."""

Manifest = dict[str, Any]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclasses.dataclass(frozen=True)
class Correlated:
    """What to send for one Event."""

    event: Manifest
    """The whole core/v1 Event, named, with its `count`, `firstTimestamp` and `lastTimestamp`."""
    update: bool
    """True: an Event of that name was sent before; raise its `count`, `lastTimestamp` and
    `message` to these (and create it whole if it is gone). False: create it."""


class _Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._items: collections.OrderedDict[K, V] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclasses.dataclass
class _Bucket:
    tokens: float
    at: float


@dataclasses.dataclass
class _Similar:
    messages: collections.OrderedDict[str, None]
    last: float


@dataclasses.dataclass
class _Sent:
    name: str
    count: int
    first_timestamp: str
    last: float


class EventCorrelator:
    """`correlate(event)`: what to send for an Event body (`kube.event_body`), or None to drop it.

    Safe to call from several threads; `clock` (seconds, monotonic) is for tests."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, cache_size: int = CACHE_SIZE) -> None:
        self._clock = clock
        self._buckets: _Lru[tuple[str, ...], _Bucket] = _Lru(cache_size)
        self._similar: _Lru[tuple[str, ...], _Similar] = _Lru(cache_size)
        self._sent: _Lru[tuple[str, ...], _Sent] = _Lru(cache_size)
        self._lock = threading.Lock()

    def correlate(self, event: Mapping[str, Any]) -> Correlated | None:
        obj = event["involvedObject"]
        about = (
            event["metadata"]["namespace"],
            str(obj.get("kind")),
            str(obj.get("name")),
            str(obj.get("uid")),
            str(obj.get("apiVersion")),
        )
        similar = (*about, str(event.get("type")), str(event.get("reason")))
        message = str(event.get("message") or "")
        with self._lock:
            now = self._clock()
            if not self._take_token(about, now):
                return None
            key: tuple[str, ...] = (*similar, message)
            if self._seen_similar(similar, message, now):  # all such Events count on one combined Event
                key, message = (*similar, COMBINED_PREFIX), COMBINED_PREFIX + message
            return self._name(key, dict(event, message=message[:MESSAGE_LIMIT]), now)

    def _take_token(self, about: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(about)
        if bucket is None:
            bucket = _Bucket(tokens=BURST, at=now)
        bucket.tokens = min(BURST, bucket.tokens + (now - bucket.at) / REFILL_SECONDS)
        bucket.at = now
        self._buckets.put(about, bucket)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _seen_similar(self, similar: tuple[str, ...], message: str, now: float) -> bool:
        """Record `message`; True when it is one too many different messages within the window."""
        record = self._similar.get(similar)
        if record is None or now - record.last > WINDOW_SECONDS:
            record = _Similar(messages=collections.OrderedDict(), last=now)
        record.messages[message] = None
        record.messages.move_to_end(message)
        record.last = now
        self._similar.put(similar, record)
        if len(record.messages) < SIMILAR_LIMIT:
            return False
        record.messages.popitem(last=False)  # the set stays under the limit; the oldest message goes
        return True

    def _name(self, key: tuple[str, ...], event: Manifest, now: float) -> Correlated:
        meta = event["metadata"]
        sent = self._sent.get(key)
        update = sent is not None and now - sent.last <= WINDOW_SECONDS
        if sent is None or not update:
            first = str(event.get("firstTimestamp") or "")
            digest = hashlib.blake2b("\0".join((*key, first, repr(now))).encode(), digest_size=8).hexdigest()
            object_name = str(event["involvedObject"].get("name") or "event")
            sent = _Sent(name=f"{object_name[:200]}.{digest}", count=0, first_timestamp=first, last=now)
        sent.count += 1
        sent.last = now
        self._sent.put(key, sent)
        event["metadata"] = {"name": sent.name, "namespace": meta["namespace"]}
        event["count"] = sent.count
        event["firstTimestamp"] = sent.first_timestamp
        return Correlated(event=event, update=update)
