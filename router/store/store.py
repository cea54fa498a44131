"""The durable message store of the nodes a router hosts: one log of records (format.py) and an
in-memory index of the live messages, for the router's single-threaded node logic.

Durability is the caller's to ask for: `append()` only buffers, and `sync()` puts everything
appended or settled since the last sync on disk with one fdatasync; the router accepts a
durable message to its sender once a sync after its append returned, so messages arriving
together share one sync. Non-durable messages are written the same way, so that their bodies
too can leave memory, but nobody waits for them: after a crash each may or may not come back
(after a clean `close()` they all do, as AMQP allows).

Memory per message is an `Entry` (the index) plus its body while the cache has room
(`memory_bytes`); beyond that bodies are read back from the log when delivered. What is left
out of the cache is the newest, not the oldest: a queue delivers from its head, so the bodies
kept are the ones needed next, and a deep backlog costs a read only once a consumer gets to it.

Space comes back a segment at a time. A segment can go once no live message is in it and no
segment whose messages its SETTLE or COUNT records (or the earlier copies its ENQUEUE records
override) refer to is left, or those messages would come back on recovery. One long-lived
message would so keep every later segment; when the live bytes fall below a quarter of the
files, `sync()` therefore first copies the live messages of the oldest segment to the end of
the log (compaction), after which the segments behind it go in turn.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from router.store.format import (
    BATCH_HEAD,
    COUNT,
    ENQUEUE,
    HEADER,
    PAGE,
    SETTLE,
    Batch,
    Count,
    Enqueue,
    FormatError,
    Page,
    PageCursor,
    PageDrop,
    Record,
    decode,
    encode_batch,
    encode_count,
    encode_enqueue,
    encode_page_cursor,
    encode_page_drop,
    encode_settle,
    read_segment_header,
    segment_header,
)
from router.store.log import Log, fsync_dir
from router.store.paging import NodePages, Recovering, pinned, records_from

RAW = 0  # in a batch: a record with no entry to account for (a PAGE_CURSOR)

# An entry's location is one int, segment << _SEGMENT_SHIFT | offset of its body: one object
# per message less than a pair. Offsets fit below 1 TiB whatever segment_bytes is.
_SEGMENT_SHIFT = 40
_OFFSET_MASK = (1 << _SEGMENT_SHIFT) - 1


class StoreError(Exception):
    """The store cannot be opened: another router has it, or its files are not readable."""


class Entry:
    """A live message of a node: what the node logic needs to order, expire and count it
    without its body. One per message held, so it has slots and nothing else."""

    __slots__ = ("_loc", "delivery_count", "durable", "expiry", "id", "node", "priority", "size")

    def __init__(
        self,
        id: int,
        node: str,
        priority: int,
        expiry: float | None,
        durable: bool,
        delivery_count: int,
        size: int,
        loc: int,
    ) -> None:
        self.id = id
        self.node = node
        self.priority = priority
        self.expiry = expiry
        self.durable = durable
        self.delivery_count = delivery_count
        self.size = size
        self._loc = loc

    def __repr__(self) -> str:
        return f"Entry(id={self.id}, node={self.node!r}, size={self.size})"


class _Segment:
    """What decides whether a segment file can be deleted."""

    __slots__ = ("live", "live_bytes", "refs")

    def __init__(self) -> None:
        self.live = 0
        self.live_bytes = 0
        self.refs: set[int] = set()  # earlier segments whose messages its records concern


class Store:
    """Open with `Store.open()`; see the module docstring for who calls what when."""

    def __init__(
        self, path: Path, lock_fd: int, segment_bytes: int, memory_bytes: int, indexed: int
    ) -> None:
        self.path = path
        self.memory_bytes = memory_bytes
        self.indexed = indexed  # messages indexed in memory before queues page (paging.py)
        self.unsynced = False
        self.syncs = 0
        self._lock_fd = lock_fd
        self._log = Log(path, segment_bytes, lambda: segment_header(self._next_id))
        self._next_id = 1
        self._live: dict[int, Entry] = {}
        self._live_bytes = 0
        self._segments: dict[int, _Segment] = {}
        self._cache: dict[int, bytes] = {}
        self._cached_bytes = 0
        self._names: dict[str, str] = {}  # one str per node name, shared by its entries
        self._maybe_free = False
        self._nodes: dict[str, dict[str, Any]] = {}
        # Inside `atomic()`: the records written so far (record, its type, its entry or, for
        # a PAGE, its node).
        self._batch: list[tuple[bytes, int, Entry | str | None]] | None = None
        self._pages: dict[str, NodePages] = {}
        self._recovering: dict[str, Recovering] = {}

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        segment_bytes: int = 64 << 20,
        memory_bytes: int = 64 << 20,
        indexed: int = 250_000,
    ) -> Store:
        path.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(path)
        try:
            store = cls(path, lock_fd, segment_bytes, memory_bytes, indexed)
            store._recover()
        except BaseException:
            os.close(lock_fd)
            raise
        return store

    def _recover(self) -> None:
        nodes = self.path / "nodes.json"
        if nodes.exists():
            try:
                self._nodes = json.loads(nodes.read_text())
            except ValueError as exc:  # never written torn (see _write_nodes): edited by hand
                raise StoreError(f"{nodes}: {exc}") from None
        for segment in self._log.existing():
            self._replay(segment)
        for node, recovering in self._recovering.items():
            pages = recovering.finish(self._log, node)
            if pages.count:
                self._pages[node] = pages
        self._recovering = {}
        for entry in self._live.values():
            info = self._segments[entry._loc >> _SEGMENT_SHIFT]
            info.live += 1
            info.live_bytes += entry.size
        self._live_bytes = sum(info.live_bytes for info in self._segments.values())
        self._log.start()
        self._segment(self._log.current)
        self.unsynced = True  # the new segment's header
        self._maybe_free = True

    def _replay(self, segment: int) -> None:
        buf = self._log.load(segment)
        try:
            next_id = read_segment_header(buf)
        except FormatError as exc:
            raise StoreError(f"{self._log.path(segment)}: {exc}") from None
        info = self._segment(segment)
        if next_id is None:
            self._log.truncate(segment, 0)
            return
        self._next_id = max(self._next_id, next_id)
        at = HEADER.size
        try:
            while (decoded := decode(buf, at)) is not None:
                record, after = decoded
                if type(record) is Batch:
                    inner = record.start
                    while (found := decode(buf, inner, record.end)) is not None:
                        self._apply(found[0], segment, inner, info)
                        inner = found[1]
                else:
                    self._apply(record, segment, at, info)
                at = after
        except FormatError as exc:
            raise StoreError(f"{self._log.path(segment)}: {exc}") from None
        if at < len(buf):
            self._log.truncate(segment, at)

    def _apply(self, record: Record, segment: int, at: int, info: _Segment) -> None:
        """One recovered record of `segment`, at offset `at`."""
        live = self._live
        if isinstance(record, Batch):
            raise FormatError("a BATCH inside a BATCH")
        if isinstance(record, Page | PageCursor | PageDrop):
            self._apply_page(record, segment, at, info)
            return
        if type(record) is Enqueue:
            loc = segment << _SEGMENT_SHIFT | record.data_at
            old = live.get(record.id)
            if old is not None and old._loc >> _SEGMENT_SHIFT != segment:
                info.refs.add(old._loc >> _SEGMENT_SHIFT)
            node = self._names.setdefault(record.node, record.node)
            live[record.id] = Entry(
                record.id,
                node,
                record.priority,
                record.expiry,
                record.durable,
                record.delivery_count,
                record.size,
                loc,
            )
            if record.id >= self._next_id:
                self._next_id = record.id + 1
            return
        entry = live.pop(record.id, None) if type(record) is not Count else live.get(record.id)
        if entry is None:
            return
        if entry._loc >> _SEGMENT_SHIFT != segment:
            info.refs.add(entry._loc >> _SEGMENT_SHIFT)
        if type(record) is Count:
            entry.delivery_count = record.delivery_count

    def _apply_page(
        self, record: Page | PageCursor | PageDrop, segment: int, at: int, info: _Segment
    ) -> None:
        recovering = self._recovering
        if isinstance(record, Page):
            found = recovering.get(record.node)
            if found is None:
                found = recovering[record.node] = Recovering()
            found.page(segment, at, record.size, record.durable)
            if record.id >= self._next_id:
                self._next_id = record.id + 1
            return
        found = recovering.get(record.node)
        if found is not None and found.start is not None:
            info.refs.update(range(found.start[0], segment))  # see paging.py
        if isinstance(record, PageCursor):
            recovering.setdefault(record.node, Recovering()).cursor(record.segment, record.offset)
        else:
            recovering.pop(record.node, None)

    def _segment(self, segment: int) -> _Segment:
        info = self._segments.get(segment)
        if info is None:
            info = self._segments[segment] = _Segment()
            self._maybe_free = True  # the segment before it no longer takes appends
        return info

    def recovered(self) -> dict[str, list[Entry]]:
        """Per node, its live messages in the order they were first appended."""
        nodes: dict[str, list[Entry]] = {}
        for entry in self._live.values():
            nodes.setdefault(entry.node, []).append(entry)
        return nodes

    def append(
        self,
        node: str,
        data: bytes,
        *,
        priority: int,
        expiry: float | None,
        durable: bool,
        delivery_count: int = 0,
    ) -> Entry:
        """Takes a message into `node`; on disk once a later `sync()` returned."""
        return self._enqueue(self._new_id(), node, priority, expiry, durable, delivery_count, data)

    def _new_id(self) -> int:
        id = self._next_id
        self._next_id = id + 1
        return id

    def _enqueue(
        self,
        id: int,
        node: str,
        priority: int,
        expiry: float | None,
        durable: bool,
        delivery_count: int,
        data: bytes,
    ) -> Entry:
        record = encode_enqueue(id, node, priority, expiry, durable, delivery_count, data)
        size = len(data)
        node = self._names.setdefault(node, node)
        entry = Entry(id, node, priority, expiry, durable, delivery_count, size, -1)
        self._live[id] = entry
        if self._batch is not None:
            self._batch.append((record, ENQUEUE, entry))
        else:
            segment, at = self._log.append(record)
            self._placed(entry, segment, at + len(record) - size)
        # In a batch the body is nowhere else until the batch is written.
        if self._cached_bytes + size <= self.memory_bytes or self._batch is not None:
            self._cache[id] = data
            self._cached_bytes += size
        self.unsynced = True
        return entry

    def room(self) -> bool:
        """Whether another message may be indexed in memory, or must be paged."""
        return len(self._live) < self.indexed

    def page(
        self,
        node: str,
        data: bytes,
        *,
        priority: int,
        expiry: float | None,
        durable: bool,
        delivery_count: int = 0,
    ) -> None:
        """Takes a message into `node` without indexing it (paging.py); on disk as `append`."""
        record = encode_enqueue(
            self._new_id(), node, priority, expiry, durable, delivery_count, data, kind=PAGE
        )
        pages = self._pages.setdefault(node, NodePages())
        pages.add(len(data), durable)
        if self._batch is not None:
            self._batch.append((record, PAGE, node))  # its place is known once written
        else:
            segment, at = self._log.append(record)
            self._segment(segment)  # known, so that it is freed once it can be
            if pages.cursor is None:
                pages.cursor = (segment, at)
        self.unsynced = True

    def paged(self, node: str) -> NodePages | None:
        """The node's paged messages (not to be changed), if it has any."""
        pages = self._pages.get(node)
        return pages if pages is not None and pages.count else None

    def paged_nodes(self) -> list[str]:
        """The nodes with paged messages."""
        return list(self._pages)

    def depage(self, node: str, want: int) -> list[Entry]:
        """Takes in up to `want` of the node's paged messages, oldest first, as entries like
        `append`'s: copies in one BATCH with the node's PAGE_CURSOR (paging.py). Nothing
        inside `atomic()`, whose batch is not written yet."""
        pages = self._pages.get(node)
        if pages is None or pages.cursor is None or self._batch is not None:
            return []
        self._log.flush()
        first, offset = pages.cursor
        found: list[tuple[Page, bytes]] = []
        cursor = (self._log.current, self._log.sizes[self._log.current])  # read to the end
        for segment in sorted(s for s in self._log.sizes if s >= first):
            start = offset if segment == first else HEADER.size
            for record, after, chunk in records_from(self._log, segment, start):
                if type(record) is Page and record.node == node:
                    found.append((record, chunk[record.data_at : record.data_at + record.size]))
                    if len(found) == want:
                        cursor = (segment, after)
                        break
            if len(found) == want:
                break
        entries = []
        with self.atomic():
            for r, data in found:
                entries.append(
                    self._enqueue(
                        r.id, node, r.priority, r.expiry, r.durable, r.delivery_count, data
                    )
                )
                pages.count -= 1
                pages.bytes -= r.size
                pages.durable -= r.durable
            batch = self._batch
            assert batch is not None
            batch.append((encode_page_cursor(node, *cursor), RAW, None))
        here = self._log.current  # where the batch went
        self._segment(here).refs.update(range(first, here))
        if len(found) < want or not pages.count:  # read to the end: none can be left
            del self._pages[node]
        else:
            pages.cursor = cursor
        return entries

    def drop_pages(self, node: str) -> None:
        """The node's paged messages are gone with it (a PAGE_DROP)."""
        pages = self._pages.pop(node, None)
        if pages is None:
            return
        segment, _ = self._log.append(encode_page_drop(node))
        info = self._segment(segment)
        if pages.cursor is not None:
            info.refs.update(range(pages.cursor[0], segment))
        self.unsynced = True

    def _placed(self, entry: Entry, segment: int, body_at: int) -> None:
        entry._loc = segment << _SEGMENT_SHIFT | body_at
        self._add(entry, segment)

    def _add(self, entry: Entry, segment: int) -> None:
        info = self._segment(segment)
        info.live += 1
        info.live_bytes += entry.size
        self._live_bytes += entry.size

    def body(self, entry: Entry) -> bytes:
        """The message as appended; read from disk when not cached, and not cached then: it is
        about to be delivered, and settled soon after."""
        data = self._cache.get(entry.id)
        if data is not None:
            return data
        loc = entry._loc
        return self._log.read(loc >> _SEGMENT_SHIFT, loc & _OFFSET_MASK, entry.size)

    def settle(self, entry: Entry) -> None:
        """The message left its node. Settling it twice is harmless: `drop_node()` settles the
        entries of a node that its node logic may still hold."""
        if self._live.pop(entry.id, None) is None:
            return
        record = encode_settle(entry.id)
        if self._batch is not None:
            self._batch.append((record, SETTLE, entry))
        else:
            segment, _ = self._log.append(record)
            self._gone(entry, segment)
        data = self._cache.pop(entry.id, None)
        if data is not None:
            self._cached_bytes -= len(data)
        self.unsynced = True

    def _gone(self, entry: Entry, segment: int) -> None:
        """Its SETTLE is in `segment`: it no longer keeps its own segment."""
        self._refer(segment, entry)
        home = self._segments[entry._loc >> _SEGMENT_SHIFT]
        home.live -= 1
        home.live_bytes -= entry.size
        self._live_bytes -= entry.size
        if home.live == 0:
            self._maybe_free = True

    def count(self, entry: Entry, delivery_count: int) -> None:
        """A delivery failed; the count survives a restart only for durable messages (a
        non-durable one may not survive at all)."""
        entry.delivery_count = delivery_count
        if not entry.durable or entry.id not in self._live:
            return
        record = encode_count(entry.id, delivery_count)
        if self._batch is not None:
            self._batch.append((record, COUNT, entry))
        else:
            segment, _ = self._log.append(record)
            self._refer(segment, entry)
        self.unsynced = True

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """What is appended, settled and counted inside reaches the log as one BATCH record
        (format.py), so that a crash leaves all of it or none: a transaction's commit. It is
        on disk, like the rest, once a later `sync()` returned. Inside another, it is part of
        that one's record."""
        if self._batch is not None:
            yield
            return
        self._batch = []
        try:
            yield
        finally:
            batch, self._batch = self._batch, None
            if batch:
                self._write_batch(batch)

    def _write_batch(self, batch: list[tuple[bytes, int, Entry | str | None]]) -> None:
        segment, at = self._log.append(encode_batch(b"".join(r for r, _, _ in batch)))
        self._segment(segment)
        offset = at + BATCH_HEAD
        for record, kind, entry in batch:
            start, offset = offset, offset + len(record)
            if isinstance(entry, Entry):
                if kind == ENQUEUE:
                    self._placed(entry, segment, offset - entry.size)
                elif kind == SETTLE:
                    self._gone(entry, segment)
                else:
                    self._refer(segment, entry)
            elif kind == PAGE and isinstance(entry, str):
                pages = self._pages.get(entry)
                if pages is not None and pages.cursor is None:
                    pages.cursor = (segment, start)

    def _refer(self, segment: int, entry: Entry) -> None:
        home = entry._loc >> _SEGMENT_SHIFT
        if home != segment:
            self._segment(segment).refs.add(home)

    def flush(self) -> None:
        """Hands what was written to the OS, not to the disk: it then survives the router's
        own death (`kill -9`), not the machine's. Cheap enough for every turn of the loop."""
        self._log.flush()

    def sync(self) -> bool:
        """Puts everything written so far on disk; whether there was anything to write."""
        assert self._batch is None, "sync() inside atomic(): the batch is not written yet"
        self._compact()
        if not self.unsynced:
            return False
        self._log.sync()
        self.unsynced = False
        self.syncs += 1
        if self._maybe_free:
            self._free()
        return True

    def _compact(self) -> None:
        """Copies the live messages of the oldest segment to the end of the log when most of
        the files is dead weight (see the module docstring); their bodies are read once."""
        oldest = next(iter(self._segments))
        if oldest == self._log.current or self._segments[oldest].live == 0:
            return
        pin = pinned(self._pages)
        if pin is not None and oldest >= pin:
            return  # it holds paged messages: copying the rest out would not free it
        if self._live_bytes * 4 >= sum(self._log.sizes.values()):
            return
        left = self._segments[oldest].live
        for entry in list(self._live.values()):
            if entry._loc >> _SEGMENT_SHIFT != oldest:
                continue
            data = self.body(entry)
            record = encode_enqueue(
                entry.id,
                entry.node,
                entry.priority,
                entry.expiry,
                entry.durable,
                entry.delivery_count,
                data,
            )
            segment, at = self._log.append(record)
            self._segment(segment).refs.add(oldest)
            self._segments[oldest].live -= 1
            self._segments[oldest].live_bytes -= entry.size
            self._live_bytes -= entry.size
            entry._loc = segment << _SEGMENT_SHIFT | at + len(record) - entry.size
            self._add(entry, segment)
            left -= 1
            if not left:
                break
        self._maybe_free = True
        self.unsynced = True

    def _free(self) -> None:
        """Deletes the segments nothing needs any more, oldest first, so that one freed lets the
        next go in the same pass. Only after a sync: a segment is freed by records after it
        (settles, compaction's copies) that must be on disk first."""
        self._maybe_free = False
        pin = pinned(self._pages)
        for segment, info in list(self._segments.items()):
            if segment == self._log.current or info.live or (pin is not None and segment >= pin):
                continue
            if any(ref in self._segments for ref in info.refs):
                continue
            self._log.delete(segment)
            del self._segments[segment]

    def stats(self) -> dict[str, int]:
        return {
            "segments": len(self._log.sizes),
            "file_bytes": sum(self._log.sizes.values()),
            "live_messages": len(self._live),
            "live_bytes": self._live_bytes,
            "cached_bytes": self._cached_bytes,
            "syncs": self.syncs,
        }

    def nodes(self) -> dict[str, dict[str, Any]]:
        """The hosted nodes and their properties, as put."""
        return {name: dict(props) for name, props in self._nodes.items()}

    def node(self, name: str) -> dict[str, Any] | None:
        """One node's properties, as put (not a copy: not to be changed)."""
        return self._nodes.get(name)

    def put_node(self, name: str, props: dict[str, Any]) -> None:
        self._nodes[name] = dict(props)
        self._write_nodes()

    def drop_node(self, name: str) -> None:
        """Forgets a node and its messages. Their settles are synced before the node goes
        from nodes.json, so a crash cannot bring back messages of a node that is gone."""
        for entry in [e for e in self._live.values() if e.node == name]:
            self.settle(entry)
        self.drop_pages(name)
        self.sync()
        if self._nodes.pop(name, None) is not None:
            self._write_nodes()

    def _write_nodes(self) -> None:
        """Replaces nodes.json so that a crash leaves the old or the new one, whole."""
        tmp = self.path / "nodes.json.tmp"
        with tmp.open("w") as file:
            json.dump(self._nodes, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self.path / "nodes.json")
        fsync_dir(self.path)

    def close(self) -> None:
        self.sync()
        self._log.close()
        os.close(self._lock_fd)


def _lock(path: Path) -> int:
    """An exclusive lock on the store for as long as the returned fd is open: two routers
    appending to one log would corrupt it. It goes with the process, however that ends."""
    lock_path = path / "lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StoreError(f"store {path} is in use by another process (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
