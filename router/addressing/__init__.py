"""Addresses: Dispatch's classes and keys (dispatch.py), address rules (rules.py), global
addresses (uri.py)."""

from router.addressing.dispatch import (
    CONTAINER_KEY,
    MANAGEMENT_ADDRESS,
    Destination,
    Kind,
    parse,
)
from router.addressing.rules import (
    DEFAULT_RULE,
    DISTRIBUTIONS,
    UNDELIVERABLE_ACTIONS,
    AddressRule,
    AddressTable,
    TokenTree,
    rule_tokens,
)
from router.addressing.uri import AddressError, GlobalAddress, parse_uri, split_container

__all__ = [
    "CONTAINER_KEY",
    "DEFAULT_RULE",
    "DISTRIBUTIONS",
    "MANAGEMENT_ADDRESS",
    "UNDELIVERABLE_ACTIONS",
    "AddressError",
    "AddressRule",
    "AddressTable",
    "Destination",
    "GlobalAddress",
    "Kind",
    "TokenTree",
    "parse",
    "parse_uri",
    "rule_tokens",
    "split_container",
]
