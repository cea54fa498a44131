"""The ``routernet-router`` command (also ``python -m router``): flags over a config file.

The router process never validates its configuration itself: pydantic and the models would be
a third of its memory for good (router/config/views.py). It parses its flags
(router/config/flags.py) only as far as it needs them, has a child process
(router/config/check.py, the same flags) validate them and the file, and runs on the records
built from what the child printed; so do live changes later.
"""

from __future__ import annotations

import faulthandler
import os
import sys

from router.config.flags import PROG, USAGE_ERROR, UsageError, parser
from router.config.views import ConfigError, config_text
from router.log import configure, get_logger


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser().parse_args(argv)
    except UsageError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR
    if args.check or args.config_stdin is not None or args.serve is not None:
        from router.config.check import main as check

        return check(argv)
    # A crash in C (Proton's, or ours through cffi) leaves the Python stack where it happened
    # on the process's stderr, the pod's log, instead of a process gone without a word (the
    # process's own: sys.stderr may be a stand-in without a file, as when a test calls main).
    if sys.__stderr__ is not None:
        faulthandler.enable(sys.__stderr__)
    from router.config.child import ChildValidator

    validate = ChildValidator(argv)
    try:
        # Read here and handed to the child, so that the file's follower knows what runs.
        text = config_text(args.config) if args.config is not None else None
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR
    pending = validate.start(text, args.config)
    # While the child validates (~0.3 s, another core): what running takes.
    from router.config.sources import config_sources
    from router.core.engine import serve
    from router.pod.status import pod_status_sources

    try:
        config = pending.result()
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR

    configure(args.log_level, args.log_format)
    get_logger("router").info(
        "config.loaded",
        file=args.config,
        id=config.router.id,
        mode=config.router.mode,
        listeners=len(config.listeners),
        connectors=len(config.connectors),
        addresses=len(config.addresses),
    )
    sources = config_sources(args.config, validate, os.environ, known=text)
    return serve(config, [*sources, *pod_status_sources(os.environ)])  # router/pod/status.py
