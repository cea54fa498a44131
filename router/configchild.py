"""The router's configuration validated in a child process, so the router never loads pydantic
(router/configviews.py says why). The child is `python -m router.configcheck` with the
command's own flags; it prints the effective configuration as JSON, from which the router
builds its records (router/configrecords.py), or one line saying what is wrong.

A validation is started and its result taken later (`Pending`): the config file is followed
from the router's loop (router/reconfigure.py FileSource), which must not wait ~0.3 s for an
interpreter to start; the ConfigMap watch waits on its own thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Protocol

from router.configrecords import RouterConfig
from router.configviews import ConfigError

# What a validation may take before it is given up (an interpreter start and pydantic's import
# take ~0.3 s; a loaded machine, much more).
TIMEOUT_SECONDS = 60.0


class Pending(Protocol):
    """A validation under way."""

    def done(self) -> bool: ...

    def result(self) -> RouterConfig:
        """Waits for it if need be; raises ConfigError with the one-line reason."""
        ...


# (config text, what it is: a file's path or a ConfigMap key) -> its validation, started.
Validate = Callable[[str, str], Pending]


class Ready:
    """A validation already done: in-process validators (router/configcheck.py) give these."""

    def __init__(self, config: RouterConfig | None = None, error: ConfigError | None = None):
        self.config = config
        self.error = error

    def done(self) -> bool:
        return True

    def result(self) -> RouterConfig:
        if self.error is not None:
            raise self.error
        assert self.config is not None
        return self.config


class ChildCheck:
    """One child validating; its output goes to files, not pipes, so a large configuration
    never blocks it while nobody reads."""

    def __init__(self, argv: list[str], text: str | None) -> None:
        # Closed by result(), which every validation started is given to.
        self._out: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        with tempfile.TemporaryFile() as stdin:
            if text is not None:
                stdin.write(text.encode())
                stdin.seek(0)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "router.configcheck", *argv],
                stdin=stdin,
                stdout=self._out,
                stderr=self._err,
                env=_child_environment(),
            )

    def done(self) -> bool:
        return self._proc.poll() is not None

    def result(self) -> RouterConfig:
        try:
            code = self._proc.wait(TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise ConfigError(f"validation took more than {TIMEOUT_SECONDS:.0f} s") from None
        finally:
            out, err = _read(self._out), _read(self._err)
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


class ChildValidator:
    """Validates with the router's own command line: ``argv`` as given to routernet-router,
    the config's text (when given) replacing its --config file."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv

    def start(self, text: str | None, source: str | None) -> Pending:
        if text is None or source is None:
            return ChildCheck(self.argv, None)
        return ChildCheck([*self.argv, "--config-stdin", source], text)

    def __call__(self, text: str, source: str) -> Pending:
        return self.start(text, source)
