"""The list + watch machinery under the quota's feed and the device inventory: one stream per listed resource, each
on its own daemon thread.

gunicorn forks workers and threads do not survive a fork, so each worker starts its own streams after the fork.
Each stream has one thread: list (paged), then watch from the list's resourceVersion with bookmarks; 410 Gone
re-lists; any other failure waits a capped, jittered backoff and resumes from the last resourceVersion seen.
What a stream finds goes to the callbacks it was made with (app/quota/feed/life.py's FeedStreams passes the Feed's,
and its own for the ResourceQuotas): they run on the stream's thread with no lock of this module held, and take
their owner's lock themselves.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from app.kube.backoff import Backoff
from app.kube.errors import GONE, NOT_FOUND, ApiError, describe

PAGE_SIZE = 500
WATCH_SECONDS = (30, 45)  # the server ends each watch after a random time in this range; we resume
READ_SLACK = 15  # a watch silent this long past its own timeout is a dead connection
WATCH_RETRY = Backoff(first=0.5, cap=30.0, jitter=0.5)  # after a broken list or watch


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


@dataclass(eq=False)
class Stream:
    """One list + watch: what it lists, where what it finds goes, and its health. Its thread alone writes ``rv``,
    ``broken_since`` and ``response``; ``stopped`` is set by whoever ends it (Streams.end): the Feed counts nothing
    it finds after."""

    name: str  # for logs: "pods in <namespace>", "resourcequotas", "leases"
    resource: str  # the metric label: pods, resourcequotas, leases
    list_call: Callable[..., Any]
    listed: Callable[[Stream, list[dict[str, Any]], str], None]  # a fresh list's items and its resourceVersion
    event: Callable[[Stream, str, Mapping[str, Any], str], None]  # an event (BOOKMARK: none), the rv it moves to
    namespace: str = ""  # the quota'd namespace whose Pods it lists ("" for the other kinds)
    rv: str = ""  # where to resume: the last event's or bookmark's resourceVersion ("" = list first)
    broken_since: float | None = None  # monotonic: since when it has been unable to list or watch
    response: Any = None
    stopped: bool = False
    thread: threading.Thread | None = None


class Streams:
    """Runs streams on daemon threads, ends them together (``stop``) and wakes them together (``nudge``).
    ``health(stream)`` is called whenever a stream is answered (a list, a watch connected) or breaks, with no lock
    held. The lock guards the running streams and the nudge count, nothing else."""

    def __init__(
        self, health: Callable[[Stream], None], feed: str = "quota feed", logger: str = "hami_webhook.quota"
    ) -> None:
        """``feed`` names the streams' owner in log lines and thread names, ``logger`` is where those lines go."""
        self._health = health
        self._feed = feed
        self._log = logging.getLogger(logger)
        self._lock = threading.Lock()
        self._nudged = threading.Condition(self._lock)  # wakes streams waiting out a back-off
        self._nudges = 0
        self._running: list[Stream] = []
        self.stopping = threading.Event()

    def start(self, stream: Stream) -> None:
        stream.thread = threading.Thread(
            target=self._run, args=(stream,), name=f"{self._feed.replace(' ', '-')}-{stream.name}"
        )
        stream.thread.daemon = True
        with self._lock:
            self._running.append(stream)
        stream.thread.start()

    def end(self, stream: Stream) -> None:
        """Stop one stream: its thread ends at its next step, its open watch is cut now."""
        stream.stopped = True
        with self._lock:
            if stream in self._running:
                self._running.remove(stream)
        cut(stream)

    def stop(self, timeout: float) -> None:
        """End every thread: wake their backoff waits and cut their open watches."""
        self.stopping.set()
        with self._lock:
            self._nudged.notify_all()
            streams = list(self._running)
        for stream in streams:
            cut(stream)
        for stream in streams:
            if stream.thread is not None:
                stream.thread.join(timeout)

    def threads(self) -> list[threading.Thread]:
        with self._lock:
            return [s.thread for s in self._running if s.thread is not None]

    def nudge(self) -> None:
        """Every stream tries again now: those waiting out a back-off at once, open watches are cut and resume
        from their resourceVersion (after a partition, a watch may be a silent socket)."""
        with self._lock:
            self._nudges += 1
            self._nudged.notify_all()
            streams = list(self._running)
        for stream in streams:
            cut(stream)

    def _ended(self, stream: Stream) -> bool:
        return self.stopping.is_set() or stream.stopped

    def _run(self, stream: Stream) -> None:
        failures = 0
        while not self._ended(stream):
            nudges = self._nudges
            try:
                if not stream.rv:
                    self._list(stream)
                    failures = 0
                self._watch(stream)
                failures = 0
            except Gone:
                self._log.info("%s: %s resourceVersion %s expired; listing again", self._feed, stream.name, stream.rv)
                stream.rv = ""
            except Exception as exc:
                if self._ended(stream):
                    break
                if self._nudges != nudges:  # cut by a nudge (the API server answers again): try again at once
                    failures = 0
                    continue
                if stream.broken_since is None:
                    stream.broken_since = time.monotonic()
                    self._health(stream)
                    if _not_served(exc):  # an API this cluster lacks (a PodGroup kind): nothing is broken
                        self._log.info("%s: %s is not served here; trying again with backoff", self._feed, stream.name)
                    else:
                        self._log.warning(
                            "%s: %s broken (%s); retrying with backoff", self._feed, stream.name, describe(exc)
                        )
                failures += 1
                self._back_off(WATCH_RETRY.delay(failures - 1))
        stream.response = None

    def _back_off(self, seconds: float) -> None:
        """Wait ``seconds`` before the next try, unless stopped or nudged."""
        with self._lock:
            nudges = self._nudges
            self._nudged.wait_for(lambda: self.stopping.is_set() or self._nudges != nudges, seconds)

    def _healthy(self, stream: Stream) -> None:
        if stream.broken_since is not None:
            self._log.info("%s: %s connected again", self._feed, stream.name)
        stream.broken_since = None
        self._health(stream)

    def _list(self, stream: Stream) -> None:
        items: list[dict[str, Any]] = []
        cont, rv = None, ""
        while True:
            try:
                response = stream.list_call(
                    limit=PAGE_SIZE, _continue=cont, _preload_content=False, _request_timeout=(5, 60)
                )
            except ApiException as exc:
                if exc.status == GONE:  # the continue token expired: start over
                    raise Gone() from None
                raise
            page = orjson.loads(response.data)
            rv = rv or page["metadata"]["resourceVersion"]
            items.extend(page.get("items") or [])
            cont = page["metadata"].get("continue")
            if not cont:
                break
        if self._ended(stream):
            return
        stream.listed(stream, items, rv)
        stream.rv = rv
        self._healthy(stream)

    def _watch(self, stream: Stream) -> None:
        seconds = random.randint(*WATCH_SECONDS)
        try:
            response = stream.list_call(
                watch=True,
                resource_version=stream.rv,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _preload_content=False,
                _request_timeout=(5, seconds + READ_SLACK),
            )
        except ApiException as exc:
            if exc.status == GONE:
                raise Gone() from None
            raise
        stream.response = response
        try:
            if self._ended(stream):
                return
            self._healthy(stream)
            for line in watch_lines(response):
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # the event's object is a Status
                    if obj.get("code") == GONE:
                        raise Gone()
                    raise ApiError(int(obj.get("code") or 0), "", obj, f"watch {stream.name}")
                if self._ended(stream):
                    break
                stream.rv = (obj.get("metadata") or {}).get("resourceVersion") or stream.rv
                stream.event(stream, str(kind), obj, stream.rv)
        finally:
            stream.response = None
            response.close()


def watch_lines(response: Any) -> Iterator[bytes]:
    """The watch stream's events, one JSON document each, as bytes.

    The client's own iter_resp_lines decodes every line to str (which orjson then encodes again) and copies
    its buffer once per line; a Pod event is kilobytes, and every worker reads every Pod event of the
    quota'd namespaces, so this is the feed's hottest loop. Chunks and events need not line up (a proxy in
    between may re-chunk the stream): what follows a chunk's last newline waits for the next chunk."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        *lines, pending = (pending + chunk if pending else chunk).split(b"\n")
        for line in lines:
            if line:
                yield line


def cut(stream: Stream) -> None:
    """Close a stream's open watch, so its thread notices at once."""
    response = stream.response
    if response is not None:
        try:
            response.shutdown()
        except Exception:  # already closed
            pass


def _not_served(exc: Exception) -> bool:
    """The API server answered 404 to a list or watch: the API is not served here (yet)."""
    code = exc.status if isinstance(exc, ApiException) else exc.code if isinstance(exc, ApiError) else None
    return code == NOT_FOUND
