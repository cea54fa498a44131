"""Where a running router's new configurations come from: its ``--config`` file, polled from
housekeeping (`FileSource`), and on Kubernetes the pod's ConfigMap, watched through the API
(router/config/sync.py). Both have what they read validated with the command line's flags over
it (a child process, router/config/child.py), so flags keep winning, and hand the result to
router/config/live.py, which applies it in place.
"""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.config.child import Pending, Ready, Validate
from router.config.live import offer
from router.config.sync import ConfigMapSource
from router.config.views import ConfigError, config_text
from router.log import get_logger

if TYPE_CHECKING:
    from router.core.engine import Router

log = get_logger("router.config")

# How often the config file's metadata is looked at (a stat; the content is read only when
# that changed), and how old its modification must be before it is read: a file being written
# in place is not read half-way (write a new file and rename it over the old one to be safe).
FILE_CHECK_SECONDS = 0.1
FILE_SETTLE_SECONDS = 0.05


class FileSource:
    """The ``--config`` file, looked at from housekeeping at most every FILE_CHECK_SECONDS
    (at rest, housekeeping comes once a second: router/core/engine.py).

    A look is one stat; the file is read only when its modification time, size or inode
    changed (a ConfigMap volume swaps a symlink; an editor or `routernet up` renames a new file
    over the old), and validated only when its content changed. Validation runs in a
    child process (router/config/child.py): the loop goes on meanwhile, and applies the result
    at the first housekeeping after it is done; the file is not looked at again until then."""

    def __init__(
        self,
        path: str | Path,
        validate: Validate,
        interval: float = FILE_CHECK_SECONDS,
        clock: Callable[[], float] = time.time,
        known: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.validate = validate
        self.interval = interval
        self.clock = clock  # wall clock, to compare with the file's mtime
        self.router: Router | None = None
        self.next_check = 0.0
        self.writing = False  # caught being written: looked at again soon
        self.stat: tuple[int, ...] | None = None
        # What was last offered: the text, or why the file could not be read. At start, the
        # text the running configuration came from if the caller read it (router/cli.py);
        # else unset, and the first look reads the file and compares the configuration with
        # the running one, so a change made before the loop started is not missed.
        self.seen: tuple[str | None, str | None] | None = None if known is None else (known, None)
        self.pending: Pending | None = None
        self.wake_fd: int | None = None  # watched by the loop while `pending` runs

    def start(self, router: Router) -> None:
        self.router = router

    def stop(self) -> None:
        self._unwatch()
        self.router = None

    def poll(self, now: float) -> None:
        if self.router is None:
            return
        if self.pending is not None:
            self._take()
            return
        if now < self.next_check:
            return
        self.next_check = now + self.interval
        self.writing = False
        try:
            st = os.stat(self.path)
            stat: tuple[int, ...] = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)
        except OSError as e:
            stat = (-1, e.errno or 0)
        if stat == self.stat:
            return
        if stat[0] >= 0:
            age = self.clock() - stat[0] / 1e9
            if 0 <= age < FILE_SETTLE_SECONDS:
                self.next_check = now  # being written: look again at the next housekeeping
                self.writing = True
                return
        self.stat = stat
        self.check()

    def check(self) -> None:
        """Read the file; have it validated if its content changed."""
        router = self.router
        assert router is not None
        try:
            text, error = config_text(self.path), None
        except ConfigError as e:
            text, error = None, str(e)
        if (text, error) == self.seen:
            return
        self.seen = (text, error)
        if text is None:
            offer(router, "file", Ready(error=ConfigError(str(error))).result)
        elif not text.strip():
            # Most likely caught half-written; never a configuration to switch to.
            empty = ConfigError(f"config file {str(self.path)!r} is empty")
            offer(router, "file", Ready(error=empty).result)
        else:
            pending = self.pending = self.validate(text, str(self.path))
            self.wake_fd = pending.exit_fd()
            if self.wake_fd is not None:
                router.sel.register(self.wake_fd, selectors.EVENT_READ, ("wakeup-handler", self))
            self._take()

    def busy(self) -> bool:
        """Whether the next look is due soon: a validation under way, or the file caught
        being written."""
        return self.pending is not None or self.writing

    def on_wakeup(self) -> None:
        """The validation may be done (router/core/engine.py: the selector's "wakeup-handler")."""
        self._take()
        if self.pending is not None and self.pending.exit_fd() is None:
            self._unwatch()  # it went over to a child of its own: housekeeping looks

    def _unwatch(self) -> None:
        if self.wake_fd is not None and self.router is not None:
            self.router.sel.unregister(self.wake_fd)
        self.wake_fd = None

    def _take(self) -> None:
        pending, router = self.pending, self.router
        if pending is not None and router is not None and pending.done():
            self.pending = None
            self._unwatch()
            offer(router, "file", pending.result)


def config_sources(
    config_path: str | None,
    validate: Validate,
    environ: Mapping[str, str] = os.environ,
    known: str | None = None,
) -> list[Any]:
    """The live sources for a router started from the command line: its ``--config`` file if
    any (``known``: the text the running configuration came from), and its ConfigMap when
    ROUTERNET_CONFIGMAP, POD_NAME and POD_NAMESPACE are set."""
    sources: list[Any] = []
    if config_path is not None:
        sources.append(FileSource(config_path, validate, known=known))
    name = environ.get("ROUTERNET_CONFIGMAP")
    pod = environ.get("POD_NAME")
    namespace = environ.get("POD_NAMESPACE")
    if name and pod and namespace:
        sources.append(ConfigMapSource(namespace, name, f"{pod}.json", validate))
    elif name:
        log.warning(
            "configsync.disabled",
            configmap=name,
            error="POD_NAME and POD_NAMESPACE must be set as well",
        )
    return sources
