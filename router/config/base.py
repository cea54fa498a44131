"""What every section of the router's configuration builds on: the strict base model and the
checks of address prefixes and patterns.

A module of its own so that sections with modules of their own (router/gateway/config.py) can
build on them: router/config/models.py imports those sections, so they cannot import it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

_SEPARATORS = re.compile(r"[./]")


class Strict(BaseModel):
    """Unknown keys are errors: a misspelt key silently ignored costs hours in production."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # What the router asks of a section, as the generated records (router/config/records.py)
    # answer it too.
    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)


def _tokens(value: str, kind: str) -> list[str]:
    tokens = _SEPARATORS.split(value)
    if "" in tokens or any(ch.isspace() for ch in value):
        raise ValueError(
            f"{value!r} is not a valid {kind}: tokens separated by '.' or '/' must be"
            " non-empty and contain no spaces"
        )
    return tokens


def check_prefix(value: str | None) -> str | None:
    if value is not None:
        for token in _tokens(value, "prefix"):
            if "*" in token or "#" in token:
                raise ValueError(f"{value!r} is not a valid prefix: use pattern for wildcards")
    return value


def check_pattern(value: str | None) -> str | None:
    if value is not None:
        for token in _tokens(value, "pattern"):
            if token not in ("*", "#") and ("*" in token or "#" in token):
                raise ValueError(
                    f"{value!r} is not a valid pattern: '*' and '#' must be whole tokens"
                )
    return value
