"""What the running router needs of its configuration besides the values, without pydantic.

The configuration is validated by the pydantic models of router/config/models.py (the one definition
of the file format, the CLI's checks and the operator's CRDs). A router process does not import
them: pydantic's runtime and the models' schemas were a third of an idle router's memory. It
runs on plain records generated from the models (router/config/records.py, `make
config-records`), built from what a validating child process printed (router/config/check.py).
The behaviour both kinds of object need (an endpoint's TLS profile, an entry's key, a match)
lives here, as mixins both inherit, so there is one copy of it; so do the error type and the
helpers the data path uses.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.addressing import AddressRule, TokenTree, rule_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

# Roles that carry router traffic: Dispatch never strips router annotations on them, whatever
# stripAnnotations says, and only inter-router connections have a cost.
ROUTER_ROLES = frozenset({"inter-router", "edge"})


class ConfigError(Exception):
    """A configuration problem, worded for the operator on one line."""

    @classmethod
    def from_validation(cls, err: ValidationError, context: str = "") -> ConfigError:
        """Flattens pydantic's multi-line report so a CLI can print it after its own name."""
        message = "; ".join(_describe(detail) for detail in err.errors())
        return cls(_one_line(f"{context}{message}"))


def _describe(detail: ErrorDetails) -> str:
    path = _path(detail["loc"])
    if detail["type"] == "value_error":
        # Our own validators already name the offending value in their message.
        text = str(detail.get("ctx", {}).get("error", detail["msg"]))
    elif detail["type"] == "extra_forbidden":
        text = "unknown key"
    elif detail["type"] == "missing":
        text = "required"
    else:
        msg = detail["msg"]
        text = f"{short_repr(detail['input'])} is invalid: {msg[:1].lower()}{msg[1:]}"
    return f"{path}: {text}" if path else text


def _one_line(text: str) -> str:
    """Keys and values from the file may hold line breaks; the message must not."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_secret(value: str, field: str) -> str:
    """Dispatch's password forms: env:VAR, file:PATH (first line), pass:TEXT, or TEXT.

    Raises ValueError with an operator-readable reason that names `field`."""
    kind, sep, rest = value.partition(":")
    if sep and kind == "env":
        found = os.environ.get(rest)
        if found is None:
            raise ValueError(f"{field}: environment variable {rest!r} is not set")
        return found
    if sep and kind == "file":
        try:
            with open(rest, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"{field}: cannot read {rest!r}: {e.strerror}") from None
    if sep and kind == "pass":
        return rest
    return value


def config_text(path: str | Path) -> str:
    """A config file's text; ConfigError naming the file and why it cannot be read."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"cannot read config file {str(path)!r}: {reason}") from None


def bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class RecordBase:
    """The generated records' behaviour, written once: built from what the models dump,
    compared, dumped (`as_dict`, `field_names`: what the router asks of a section, which the
    models answer too, router/config/base.py) and shown as the models are. Each record class
    says, in class attributes, its fields, the attributes beyond them that take part in
    equality (the models' private ones), and which fields hold records: ``(field, kind,
    class)``, kind ``one`` (or None), ``list`` or ``dict``."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()
    _PRIVATE: tuple[str, ...] = ()
    _NESTED: tuple[tuple[str, str, type[RecordBase]], ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """From ``model_dump(mode="json")`` of the model of the same name: trusted, as the
        model validated it; only its nested sections are made records."""
        values = {name: data[name] for name in cls._FIELDS}
        for name, kind, record in cls._NESTED:
            value = values[name]
            if value is None:
                continue
            if kind == "one":
                values[name] = record.from_dict(value)
            elif kind == "list":
                values[name] = [record.from_dict(item) for item in value]
            else:
                values[name] = {key: record.from_dict(item) for key, item in value.items()}
        built = cls(**values)
        built.built()
        return built

    def built(self) -> None:
        """Called by from_dict once every field is set."""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return cls._FIELDS

    def as_dict(self) -> dict[str, Any]:
        """As the model's ``model_dump()``: nested sections as dicts, private attributes out."""
        return {name: _dumped(getattr(self, name)) for name in self._FIELDS}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(
            getattr(self, name) == getattr(other, name) for name in (*self._FIELDS, *self._PRIVATE)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the models are

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({shown})"


def _dumped(value: Any) -> Any:
    if isinstance(value, RecordBase):
        return value.as_dict()
    if isinstance(value, list):
        return [_dumped(item) for item in value]
    if isinstance(value, dict):
        return {key: _dumped(item) for key, item in value.items()}
    return value


class EndpointView:
    """Listeners and connectors: the sslProfile they name, resolved (RouterConfigView)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _ssl: Any

    @property
    def ssl(self) -> Any:
        """The SslProfile named by sslProfile, or None; part of equality, so a changed
        profile changes its users."""
        return self._ssl


class ListenerView(EndpointView):
    __slots__ = ()
    if TYPE_CHECKING:
        host: str
        port: int
        authenticatePeer: bool
        saslMechanisms: Sequence[str]

    @property
    def verifies_clients(self) -> bool:
        """Whether TLS clients must present a certificate signed by the profile's caCertFile."""
        return self.authenticatePeer or "EXTERNAL" in self.saslMechanisms

    @property
    def address(self) -> str:
        """HOST:PORT with IPv6 hosts bracketed, for log lines and messages."""
        return f"{bracketed(self.host)}:{self.port}"


class ConnectorView(EndpointView):
    __slots__ = ()
    if TYPE_CHECKING:
        host: str
        port: int

    @property
    def address(self) -> str:
        """HOST:PORT with IPv6 hosts bracketed, for log lines and messages."""
        return f"{bracketed(self.host)}:{self.port}"


class AddressView:
    __slots__ = ()
    if TYPE_CHECKING:
        prefix: str | None
        pattern: str | None

    @property
    def key(self) -> str:
        """``prefix:X`` or ``pattern:X``: identifies the entry in messages and duplicate checks."""
        return f"prefix:{self.prefix}" if self.prefix is not None else f"pattern:{self.pattern}"


class LinkRouteView:
    __slots__ = ()
    if TYPE_CHECKING:
        prefix: str | None
        pattern: str | None
        direction: str

    @property
    def key(self) -> str:
        """Identifies the entry in messages and duplicate checks."""
        match = f"prefix:{self.prefix}" if self.prefix is not None else f"pattern:{self.pattern}"
        return f"{match} direction:{self.direction}"


@lru_cache(maxsize=1024)
def _pattern_tree(pattern: str) -> TokenTree[bool]:
    """Built once per pattern, outside the object: an attribute would take part in its
    equality, and live reconfiguration compares configurations."""
    tree: TokenTree[bool] = TokenTree()
    tree.add(rule_tokens(None, pattern), True)
    return tree


class MatchView:
    __slots__ = ()
    if TYPE_CHECKING:
        exact: str | None
        prefix: str | None
        pattern: str | None

    def matches(self, value: str) -> bool:
        if self.exact is not None:
            return value == self.exact
        if self.prefix is not None:
            return value.startswith(self.prefix)
        assert self.pattern is not None
        return _pattern_tree(self.pattern).find(value) is not None


class RouterConfigView:
    __slots__ = ()
    if TYPE_CHECKING:
        sslProfiles: list[Any]
        listeners: list[Any]
        connectors: list[Any]
        addresses: list[Any]

    def built(self) -> None:
        self.resolve_ssl()

    def address_rules(self) -> list[AddressRule]:
        """The forwarder's rules for these addresses (ValueError for a combination the table
        refuses, so that a live change with one is refused whole)."""
        return [
            AddressRule(
                prefix=a.prefix,
                pattern=a.pattern,
                distribution=a.distribution,
                undeliverable=a.undeliverable,
                hold_timeout=a.holdTimeoutSeconds,
                fallback=a.fallbackAddress,
                priority=a.priority,
            )
            for a in self.addresses
        ]

    def resolve_ssl(self) -> None:
        """Points every listener and connector at the sslProfile it names (the models check
        that it exists and fits; records built from their output trust it)."""
        profiles = {p.name: p for p in self.sslProfiles}
        for entry in (*self.listeners, *self.connectors):
            name = entry.sslProfile
            entry._ssl = profiles.get(name) if name is not None else None
