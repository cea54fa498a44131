"""Global addresses: the AMQP addressing proposal's URI, parsed and printed (no I/O).

    { amqp | amqps } : [ //user:key@ip-endpoint/ ] [ (container-name)/ ] [ [$] node-path ]

and the bare forms ``node``, ``$node``, ``(container)/node`` and ``()/node``. Three layers: the
host picks a gateway to connect to, the container the AMQP container behind it (``()``: the
gateway's rules pick one from the message), the node a node in that container.

Choices the proposal leaves open, made here so that every address prints back to itself:

- A container name is any text without ``(``, ``)`` or ``/``: client container ids are UUIDs or
  names like ``london-branch-34``, with dots or colons at times; ``/`` ends the part. It is
  taken verbatim (not percent-decoded), as it is compared with the ids containers announce.
- A node path is any text (``/`` and ``.`` included, verbatim as an AMQP address is) without
  parentheses, which belong to the container part, and not starting with ``/``. ``$`` alone is
  a reserved marker naming nothing.
- One leading ``/`` before the path is skipped, as Dispatch skips it (``amqp:/queue``).
- A scheme is ``amqp:``/``amqps:`` (any case) or anything followed by ``://`` (refused); other
  text with a colon (``topic:orders``) is a bare node, as plain addresses have always been.
- There is no query or fragment: after the host, everything is container and node.
- ``user``/``key`` are percent-decoded, printed percent-encoded; a host is a DNS name, an IPv4
  literal or a bracketed IPv6 literal (kept without brackets); the port is 1..65535.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass, field

SCHEMES = ("amqp", "amqps")
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# RFC 3986's reg-name without percent-encoding: a DNS name or an IPv4 literal.
_HOST = re.compile(r"[A-Za-z0-9._~!$&'*+,;=-]+")
_PORT = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# The first characters a container form can have: "(", Dispatch's "/" or a scheme's "a".
_CONTAINER_STARTS = frozenset("(/aA")
# The key of `scheme://user:key@`, masked in error messages.
_KEY = re.compile(r"(://[^/:@]*):[^/]*@")


class AddressError(ValueError):
    """An address that is not in the grammar; the message is one line naming the input."""


def _node_problem(node: str) -> str | None:
    if "(" in node or ")" in node:
        return "parentheses may only enclose a container name, before the node path"
    if node.startswith("/"):
        return "the node path starts with '/'"
    if node == "$":
        return "'$' alone names no node"
    return None


def _container_problem(container: str) -> str | None:
    if "(" in container:
        return "nested parentheses"
    if ")" in container or "/" in container:
        return "a container name may not hold ')' or '/'"
    return None


def _host_problem(host: str) -> str | None:
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address"
        return None
    if not host:
        return "no host"
    if not _HOST.fullmatch(host):
        return f"bad host {host!r}"
    return None


@dataclass(frozen=True, slots=True)
class GlobalAddress:
    """One address of the grammar. Construction checks every part, so that whatever exists
    prints as text that parses back to it."""

    scheme: str | None = None
    """"amqp" or "amqps"; None for the bare forms."""
    user: str | None = None
    key: str | None = field(default=None, repr=False)
    """The password; None when the URI has no ``:key``."""
    host: str | None = None
    """A DNS name or IP literal, IPv6 without brackets."""
    port: int | None = None
    """The port given, if any: default_port() fills in the scheme's."""
    container: str | None = None
    """None: no container part; "": the anonymous ``()``."""
    node: str = ""
    """The node path with its leading "$" if reserved; "" for none."""

    def __post_init__(self) -> None:
        problem = _problem(
            self.scheme, self.user, self.key, self.host, self.port, self.container, self.node
        )
        if problem is not None:
            raise AddressError(f"bad address {self!r}: {problem}")

    @property
    def reserved(self) -> bool:
        return self.node.startswith("$")

    @property
    def anonymous(self) -> bool:
        return self.container == ""

    def default_port(self) -> int:
        if self.port is not None:
            return self.port
        return DEFAULT_PORTS["amqps" if self.scheme == "amqps" else "amqp"]

    def routing_address(self) -> str:
        """The address a client attaches to, or puts in ``to``, on the gateway it reached:
        the URI without scheme and host."""
        if self.container is None:
            return self.node
        return f"({self.container})/{self.node}"

    def __str__(self) -> str:
        if self.scheme is None:
            return self.routing_address()
        if self.host is None:
            return f"{self.scheme}:{self.routing_address()}"
        userinfo = ""
        if self.user is not None:
            userinfo = urllib.parse.quote(self.user, safe="")
            if self.key is not None:
                userinfo += ":" + urllib.parse.quote(self.key, safe="")
            userinfo += "@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port is None else f":{self.port}"
        path = self.routing_address()
        return f"{self.scheme}://{userinfo}{host}{port}{'/' + path if path else ''}"


def _problem(
    scheme: str | None,
    user: str | None,
    key: str | None,
    host: str | None,
    port: int | None,
    container: str | None,
    node: str,
) -> str | None:
    """What keeps these parts from printing as text of the grammar, if anything."""
    if scheme is not None and scheme not in SCHEMES:
        return f"unknown scheme {scheme!r}"
    if host is None:
        if user is not None or key is not None or port is not None:
            return "user, key and port need a host"
    elif scheme is None:
        return "a host needs the amqp or amqps scheme"
    else:
        bad_host = _host_problem(host)
        if bad_host is not None:
            return bad_host
    if key is not None and user is None:
        return "a key needs a user"
    if user == "":
        return "empty user name"
    if port is not None and not 0 < port < 65536:
        return f"port {port} out of range"
    if container is not None:
        bad_container = _container_problem(container)
        if bad_container is not None:
            return bad_container
    if scheme is None and container is None and not node:
        return "nothing to address"
    return _node_problem(node)


def parse_uri(text: str, *, require_node: bool = False) -> GlobalAddress:
    """``text`` as a GlobalAddress; AddressError if it is not in the grammar, or names no node
    when ``require_node`` (a link must attach to something)."""
    try:
        return _parse(text, require_node)
    except _Problem as problem:
        shown = _KEY.sub(r"\1:***@", text)  # a one-line error, but not the password in it
        raise AddressError(f"bad address {shown!r}: {problem}") from None


class _Problem(Exception):
    """What is wrong, for parse_uri to say along with the input."""


def _parse(text: str, require_node: bool) -> GlobalAddress:
    if not text:
        raise _Problem("empty")
    scheme: str | None = None
    rest = text
    match = _SCHEME.match(text)
    if match is not None:
        name = match.group(1).lower()
        if name in SCHEMES:
            scheme, rest = name, text[match.end() :]
        elif text.startswith("//", match.end()):
            raise _Problem(f"unknown scheme {match.group(1)!r} (amqp or amqps)")
    user = key = host = None
    port: int | None = None
    if rest.startswith("//"):
        if scheme is None:
            raise _Problem("a host needs the amqp: or amqps: scheme")
        authority, _, rest = rest[2:].partition("/")
        userinfo, at, hostport = authority.rpartition("@")
        if at:
            raw_user, colon, raw_key = userinfo.partition(":")
            user = _decode(raw_user, "user")
            key = _decode(raw_key, "key") if colon else None
        host, port = _host_port(hostport)
    elif rest.startswith("/"):
        rest = rest[1:]  # Dispatch's `amqp:/queue`
    container: str | None = None
    node = rest
    if rest.startswith("("):
        close = rest.find(")")
        if close < 0:
            raise _Problem("unbalanced '('")
        container = rest[1:close]
        if "(" in container:
            raise _Problem("nested parentheses")
        if "/" in container:
            raise _Problem("unbalanced '(': no ')' before '/'")
        if not rest.startswith("/", close + 1):
            raise _Problem(f"({container}) is not followed by '/'")
        node = rest[close + 2 :]
    if require_node and not node:
        raise _Problem("no node path")
    problem = _problem(scheme, user, key, host, port, container, node)
    if problem is not None:
        raise _Problem(problem)
    return GlobalAddress(scheme, user, key, host, port, container, node)


def _decode(raw: str, what: str) -> str:
    if _PERCENT.search(raw):
        raise _Problem(f"bad percent-encoding in the {what}")
    try:
        return urllib.parse.unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise _Problem(f"the {what} is not UTF-8 once percent-decoded") from None


def _host_port(text: str) -> tuple[str, int | None]:
    port_text: str | None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise _Problem("unbalanced '[' in the host")
        host, after = text[1:close], text[close + 1 :]
        if ":" not in host:
            raise _Problem(f"{host!r} is not an IPv6 address")
        if after and not after.startswith(":"):
            raise _Problem(f"{after!r} after the host")
        port_text = after[1:] if after else None
    else:
        host, colon, after = text.partition(":")
        if ":" in after:
            raise _Problem("an IPv6 host needs brackets: [addr]")
        port_text = after if colon else None
    if not host:
        raise _Problem("no host")
    if port_text is None:
        return host, None
    if not _PORT.fullmatch(port_text):
        raise _Problem(f"port {port_text!r} is not a number")
    port = int(port_text)
    if not 0 < port < 65536:
        raise _Problem(f"port {port} out of range (1-65535)")
    return host, port


def split_container(address: str) -> tuple[str, str] | None:
    """(container, node) of a container form: ``(c)/node``, ``amqp:(c)/node``,
    ``amqp:/(c)/node`` or ``/(c)/node`` (Dispatch's leading slash), or a URI with a host and a
    container; ``()`` gives "". None for anything else, malformed container forms included:
    routers call this for every attach and every message to the anonymous relay, so it never
    raises and settles the common case (no parenthesis, no scheme) with a few prefix checks."""
    if address[:1] not in _CONTAINER_STARTS:
        return None  # most addresses: one check
    if address.startswith("("):
        rest = address
    elif address.startswith("/("):
        rest = address[1:]
    else:
        head = address[:6].lower()
        if head.startswith("amqp:"):
            rest = address[5:]
        elif head == "amqps:":
            rest = address[6:]
        else:
            return None
        if rest.startswith("//"):
            try:
                parsed = parse_uri(address)
            except AddressError:
                return None
            return None if parsed.container is None else (parsed.container, parsed.node)
        if rest.startswith("/"):
            rest = rest[1:]
        if not rest.startswith("("):
            return None
    close = rest.find(")")
    if close < 0 or not rest.startswith("/", close + 1):
        return None
    container, node = rest[1:close], rest[close + 2 :]
    if _container_problem(container) is not None or _node_problem(node) is not None:
        return None
    return container, node
