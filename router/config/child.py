"""The router's configuration validated in a child process, so the router never loads pydantic
(router/config/views.py says why). The child is `python -m router.config.check` with the
command's own flags; it prints the effective configuration as JSON, from which the router
builds its records (router/config/records.py), or one line saying what is wrong.

A validation is started and its result taken later (`Pending`): the config file is followed
from the router's loop (router/config/sources.py FileSource), which must not wait ~0.3 s for an
interpreter to start; the ConfigMap watch waits on its own thread.

Changes come in bursts (an operator's edits, `routernet up` rewriting configs), and on a busy
machine a child's start (~0.2 s of CPU: the interpreter, pydantic, the models) took over a
second. So the child that validates a change stays for the next ones (`WarmChild`,
`--serve`), answering each in milliseconds, and exits by itself after IDLE_SECONDS without
one: a router holds it only while its configuration is changing, never when idle.

No file is ever made for this: a router pod runs with a read-only root file system and no
writable /tmp (rendering/router.py), and a `tempfile` there crashed every router at start. A
one-shot child's input and output are memory files (memfd) and a warm child's requests and answers
go over its pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Protocol

from router.config.records import RouterConfig
from router.config.views import ConfigError

# What a validation may take before it is given up (an interpreter start and pydantic's import
# take ~0.3 s; a loaded machine, much more).
TIMEOUT_SECONDS = 60.0
# How long a warm child waits for another request; a router stops using it IDLE_MARGIN before,
# so that it never sends a request to a child that is just leaving.
IDLE_SECONDS = 30.0
IDLE_MARGIN = 5.0


class Pending(Protocol):
    """A validation under way."""

    def done(self) -> bool: ...

    def result(self) -> RouterConfig:
        """Waits for it if need be; raises ConfigError with the one-line reason."""
        ...

    def exit_fd(self) -> int | None:
        """A descriptor that turns readable once it is done, for a loop to wait on (until
        `result`); None if there is none to wait on."""
        ...


# (config text, what it is: a file's path or a ConfigMap key) -> its validation, started.
Validate = Callable[[str, str], Pending]


class Ready:
    """A validation already done: in-process validators (router/config/check.py) give these."""

    def __init__(self, config: RouterConfig | None = None, error: ConfigError | None = None):
        self.config = config
        self.error = error

    def done(self) -> bool:
        return True

    def exit_fd(self) -> int | None:
        return None

    def result(self) -> RouterConfig:
        if self.error is not None:
            raise self.error
        assert self.config is not None
        return self.config


def _memory_file(name: str) -> IO[bytes]:
    """A file with no name in any file system (memfd): what a child may read or write as a
    file, even where no directory is writable."""
    return open(os.memfd_create(name), "w+b")


class ChildCheck:
    """One child validating; its output goes to memory files, not pipes, so a large
    configuration never blocks it while nobody reads."""

    def __init__(self, argv: list[str], text: str | None) -> None:
        # Closed by result(), which every validation started is given to.
        self._out = _memory_file("routernet-config-out")
        self._err = _memory_file("routernet-config-err")
        with _memory_file("routernet-config-in") as stdin:
            if text is not None:
                stdin.write(text.encode())
                stdin.seek(0)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "router.config.check", *argv],
                stdin=stdin,
                stdout=self._out,
                stderr=self._err,
                env=_child_environment(),
            )
        # Readable once the child exits (Linux 5.3+): the router's loop wakes for the result
        # at once instead of at its next housekeeping.
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(self._proc.pid)

    def done(self) -> bool:
        return self._proc.poll() is not None

    def exit_fd(self) -> int | None:
        return self._pidfd

    def result(self) -> RouterConfig:
        try:
            code = self._proc.wait(TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise ConfigError(f"validation took more than {TIMEOUT_SECONDS:.0f} s") from None
        finally:
            out, err = _read(self._out), _read(self._err)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        if code != 0:
            # The child's one line, "routernet-router: <reason>" (a crash's last line else).
            lines = err.strip().splitlines() or [f"the validator exited with status {code}"]
            prog, sep, reason = lines[-1].partition(": ")
            raise ConfigError(reason if sep and prog == "routernet-router" else lines[-1])
        return RouterConfig.from_dict(json.loads(out))


def _child_environment() -> dict[str, str]:
    """Ours, with our import path as it is: the child finds the router package where we did
    (a source checkout's directory included, a console script's directory not), and nothing
    from the directory it happens to run in."""
    path = os.pathsep.join(entry for entry in sys.path if entry)
    return {**os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}


def _read(file: IO[bytes]) -> str:
    with file:
        file.seek(0)
        return file.read().decode(errors="replace")


def cold_check(argv: list[str], text: str, source: str) -> ChildCheck:
    """A child of its own for one config's text, `source` naming it in errors."""
    return ChildCheck([*argv, "--config-stdin", source], text)


class WarmChild:
    """`python -m router.config.check --serve IDLE_SECONDS`: validates request after request,
    one at a time, with the router's flags, sent first as a JSON list (not on its command line,
    which would pass for the router's own: `routernet` and tests find routers by theirs). A
    request is a line `{"source", "text"}` on its standard input; its answer, `{"config": …}`
    or `{"error": …}`, a line on its standard output, which is what a loop waits on. Neither
    blocks for long: the child reads while it waits for requests, and writes its answer whole
    while the router, woken by its first bytes, reads to the end of the line."""

    def __init__(self, argv: list[str]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "router.config.check", "--serve", str(IDLE_SECONDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_environment(),
        )
        self.busy = False
        self.used_at = time.monotonic()
        self.send(json.dumps(argv).encode() + b"\n")

    def usable(self) -> bool:
        return (
            not self.busy
            and self._proc.poll() is None
            and time.monotonic() - self.used_at < IDLE_SECONDS - IDLE_MARGIN
        )

    def request(self, argv: list[str], text: str, source: str) -> WarmCheck:
        self.busy = True
        return WarmCheck(self, argv, text, source)

    def send(self, line: bytes) -> bool:
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
            return True
        except OSError:  # it left (its idle time, or a crash): the request goes to a new child
            return False

    def answer(self, timeout: float) -> bytes | None:
        """Its answer line if it came within `timeout`: b"" when it did not, None when the
        child exited without one."""
        out = self._proc.stdout
        assert out is not None
        if not select.select([out], [], [], timeout)[0]:
            return b""
        return out.readline() or None

    def fileno(self) -> int:
        assert self._proc.stdout is not None
        return self._proc.stdout.fileno()

    def done_with(self) -> None:
        self.busy = False
        self.used_at = time.monotonic()

    def abandon(self) -> None:
        """A request it did not answer in time: its late answer must not pass for the next
        one's, so it goes (and the next change starts a new child)."""
        self._proc.kill()
        self._proc.wait()
        self.busy = False


class WarmCheck:
    """One request to a warm child; if the child is gone, a cold ChildCheck takes it over."""

    def __init__(self, child: WarmChild, argv: list[str], text: str, source: str) -> None:
        self._child = child
        self._argv, self._text, self._source = argv, text, source
        self._answer = b""
        self._cold: ChildCheck | None = None
        line = {"source": source, "text": text}
        if not child.send(json.dumps(line).encode() + b"\n"):
            self._fall_back()

    def _fall_back(self) -> None:
        self._child.done_with()
        self._cold = cold_check(self._argv, self._text, self._source)

    def exit_fd(self) -> int | None:
        return self._child.fileno() if self._cold is None else None

    def done(self) -> bool:
        if self._cold is not None:
            return self._cold.done()
        if not self._answer:
            line = self._child.answer(0)
            if line is None:
                self._fall_back()
                return False
            self._answer = line
        return bool(self._answer)

    def result(self) -> RouterConfig:
        if self._cold is None and not self._answer:
            line = self._child.answer(TIMEOUT_SECONDS)
            if line is None:
                self._fall_back()
            elif not line:
                self._child.abandon()
                raise ConfigError(f"validation took more than {TIMEOUT_SECONDS:.0f} s")
            else:
                self._answer = line
        if self._cold is not None:
            return self._cold.result()
        self._child.done_with()
        try:
            answer = json.loads(self._answer)
        except ValueError:
            answer = {}
        if "config" not in answer:
            raise ConfigError(str(answer.get("error", "the validator gave no answer")))
        return RouterConfig.from_dict(answer["config"])


class ChildValidator:
    """Validates with the router's own command line: ``argv`` as given to routernet-router,
    the config's text (when given) replacing its --config file. Changes go to a warm child,
    one at a time; one that comes while it is busy (the file and the ConfigMap at once) gets a
    child of its own."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._warm: WarmChild | None = None
        self._lock = threading.Lock()

    def start(self, text: str | None, source: str | None) -> Pending:
        if text is None or source is None:
            return ChildCheck(self.argv, None)
        with self._lock:
            warm = self._warm
            if warm is None or not (warm.usable() or warm.busy):
                warm = self._warm = WarmChild(self.argv)
            if warm.busy:
                return cold_check(self.argv, text, source)
            return warm.request(self.argv, text, source)

    def __call__(self, text: str, source: str) -> Pending:
        return self.start(text, source)
