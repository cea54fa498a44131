"""Server-side SASL: Cyrus SASL, set up the way Qpid Dispatch sets it up.

Proton verifies PLAIN (and every mechanism but ANONYMOUS and EXTERNAL) only when it was built
against Cyrus SASL. Cyrus is configured per process, not per connection: Proton hands it the
config directory and name once, when the first server connection starts SASL, so `configure`
must run before the router accepts anything. Cyrus then reads
``<saslConfigDir>/<saslConfigName>.conf`` (its default search path when there is no
saslConfigDir), and the mechanisms a listener offers are the ones in both the listener's
``saslMechanisms`` and that file's ``mech_list``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from router.config.records import RouterSettings
from router.transport.pn import lib, text

# Mechanisms Proton's built-in SASL (the fallback without Cyrus) can verify as a server.
BUILTIN_MECHANISMS = frozenset({"ANONYMOUS", "EXTERNAL"})


def cyrus_available() -> bool:
    """Whether the installed python-qpid-proton was built against Cyrus SASL."""
    return bool(lib.pn_sasl_extended())


def configure(settings: RouterSettings, mechanisms: Iterable[str]) -> str | None:
    """Gives Cyrus the router's config dir and name; returns a problem to report, or None.

    ``mechanisms`` are those the listeners offer: without Cyrus only ANONYMOUS works, and a
    listener offering PLAIN would silently never authenticate anyone, so that is a problem.
    """
    if not cyrus_available():
        unsupported = sorted(set(mechanisms) - BUILTIN_MECHANISMS)
        if unsupported:
            return (
                f"listeners offer {' '.join(unsupported)} but python-qpid-proton was built"
                " without Cyrus SASL, which verifies them (rebuild it from source with"
                " libsasl2-dev and pkg-config present: make clean && make test)"
            )
        return None
    # Both calls take a pn_sasl_t for form's sake only: the settings are process-wide, and the
    # first value given wins. A throwaway transport supplies the pn_sasl_t.
    transport = lib.pn_transport()
    try:
        sasl = lib.pn_sasl(transport)
        if settings.saslConfigDir is not None:
            path = os.path.abspath(settings.saslConfigDir)
            lib.pn_sasl_config_path(sasl, path.encode())
        lib.pn_sasl_config_name(sasl, settings.saslConfigName.encode())
    finally:
        lib.pn_decref(transport)
    return None


def failed_mechanism(transport: Any) -> str | None:
    """The mechanism a client failed to authenticate with on this transport, else None.

    A refused client never gets a PN_TRANSPORT_ERROR handled: Proton raises it while writing
    the outcome, and the router frees the finished transport straight after. So the router
    asks here, before freeing, to log the refusal.
    """
    sasl = lib.pn_sasl(transport)
    if lib.pn_sasl_outcome(sasl) in (lib.PN_SASL_NONE, lib.PN_SASL_OK):
        return None
    return text(lib.pn_sasl_get_mech(sasl)) or "none"
