"""The segmented append-only log under the store: files, buffering, fsync, reads. No records.

Appends collect in one buffer that reaches the file when a reader needs it, when it grows past
`_FLUSH_BYTES`, or at `sync()`: the router appends many records per turn of its loop and syncs
once, so most appends cost no system call at all. Reads use `os.pread` on the segment's own fd,
which leaves the write position alone, and which is kept open: a queue's consumers read their
bodies back in order, many per segment.

A segment is rotated once it holds `segment_bytes` (a record is never split, so one larger
message makes a larger segment) so that space comes back a segment at a time: the store deletes
a segment when nothing in it is needed any more. The files created since the last sync are
made durable by fsyncing the directory too, or a crash could lose a segment whose records had
been synced.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from router.store.format import HEADER, segment_name

_FLUSH_BYTES = 256 * 1024
_SEGMENT = re.compile(r"^(\d{8})\.log$")


class Log:
    """Segments in `directory`; `header()` gives the bytes each new segment starts with."""

    def __init__(self, directory: Path, segment_bytes: int, header: Callable[[], bytes]) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._header = header
        self._fds: dict[int, int] = {}
        self.sizes: dict[int, int] = {}  # per segment, bytes including the unflushed buffer
        self.current = 0
        self._buf = bytearray()
        self._unsynced: list[int] = []  # segments written since the last sync, oldest first
        self._new_files = False

    def existing(self) -> list[int]:
        """The segment numbers in the directory, ascending; for recovery, before `start()`."""
        found = (_SEGMENT.match(name) for name in os.listdir(self.directory))
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, segment: int) -> Path:
        return self.directory / segment_name(segment)

    def load(self, segment: int) -> bytes:
        """A recovered segment's whole content: at most about `segment_bytes`."""
        data = self.path(segment).read_bytes()
        self.sizes[segment] = len(data)
        return data

    def truncate(self, segment: int, size: int) -> None:
        """Cuts a torn tail off a recovered segment."""
        os.truncate(self.path(segment), size)
        self.sizes[segment] = size

    def start(self) -> None:
        """Opens a new segment after the recovered ones: appends never go into a file a crash
        may have left torn."""
        self._open(max(self.sizes, default=0) + 1)

    def _open(self, segment: int) -> None:
        fd = os.open(self.path(segment), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._fds[segment] = fd
        self.current = segment
        self._buf += self._header()
        self.sizes[segment] = len(self._buf)
        self._unsynced.append(segment)
        self._new_files = True

    def append(self, record: bytes) -> tuple[int, int]:
        """Where the record starts: (segment, offset)."""
        size = self.sizes[self.current]
        if size + len(record) > self.segment_bytes and size > HEADER.size:
            self.flush()
            self._open(self.current + 1)
            size = self.sizes[self.current]
        elif len(self._buf) >= _FLUSH_BYTES:
            self.flush()
        self._buf += record
        self.sizes[self.current] = size + len(record)
        return self.current, size

    def flush(self) -> None:
        """Hands the buffer to the OS (not to the disk: that is `sync()`)."""
        if not self._buf:
            return
        fd = self._fds[self.current]
        view = memoryview(self._buf)
        while view:
            view = view[os.write(fd, view) :]
        view.release()
        self._buf.clear()

    def sync(self) -> None:
        """Everything appended so far is on disk when this returns."""
        self.flush()
        for segment in self._unsynced:
            fd = self._fds.get(segment)
            if fd is not None:
                os.fdatasync(fd)
        self._unsynced = [self.current]
        if self._new_files:
            fsync_dir(self.directory)
            self._new_files = False

    def read(self, segment: int, offset: int, length: int) -> bytes:
        if segment == self.current and offset + length > self.sizes[segment] - len(self._buf):
            self.flush()
        fd = self._fds.get(segment)
        if fd is None:
            fd = self._fds[segment] = os.open(self.path(segment), os.O_RDONLY)
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise OSError(f"{self.path(segment)}: {len(data)} bytes at {offset}, not {length}")
        return data

    def delete(self, segment: int) -> None:
        """Removes a segment the store no longer needs; never the one being appended to."""
        assert segment != self.current
        fd = self._fds.pop(segment, None)
        if fd is not None:
            os.close(fd)
        if segment in self._unsynced:
            self._unsynced.remove(segment)
        del self.sizes[segment]
        self.path(segment).unlink()

    def close(self) -> None:
        self.sync()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def fsync_dir(directory: Path) -> None:
    """Makes the files created in, renamed into or removed from `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
