"""The one place that touches Proton's C engine through the cffi module python-qpid-proton ships.

That module (`cproton_ffi`) is not documented public API, so its use stays here, behind the
narrow python-qpid-proton version range pinned in pyproject.toml. Everything else in the router
calls `lib.pn_*` through this module and uses the helpers below for the slow paths (attach,
conditions, properties) where convenience beats raw speed.
"""

from __future__ import annotations

from typing import Any

from cproton_ffi import ffi, lib
from proton import Data, symbol

NULL = ffi.NULL

__all__ = [
    "NULL",
    "data_get",
    "data_put",
    "ffi",
    "get_condition",
    "lib",
    "set_condition",
    "text",
]


def text(ptr: Any) -> str | None:
    """A C string owned by Proton, as a Python str (None for NULL)."""
    if ptr == NULL:
        return None
    return ffi.string(ptr).decode("utf-8", "replace")


def cbytes(value: str | None) -> Any:
    return NULL if value is None else value.encode("utf-8")


def data_get(ptr: Any) -> Any:
    """The first value held by a pn_data_t (capabilities, properties, condition info)."""
    if ptr == NULL:
        return None
    data = Data(ptr)
    data.rewind()
    if not data.next():
        return None
    value = data.get_object()
    data.rewind()
    return value


def data_put(ptr: Any, value: Any) -> None:
    data = Data(ptr)
    data.clear()
    if value is not None:
        data.put_object(value)


def get_condition(cond: Any) -> tuple[str, str | None, Any] | None:
    """(name, description, info) of a pn_condition_t, or None when it is not set."""
    if cond == NULL or not lib.pn_condition_is_set(cond):
        return None
    return (
        text(lib.pn_condition_get_name(cond)) or "",
        text(lib.pn_condition_get_description(cond)),
        data_get(lib.pn_condition_info(cond)),
    )


def set_condition(cond: Any, name: str, description: str | None = None, info: Any = None) -> None:
    lib.pn_condition_set_name(cond, name.encode())
    if description is not None:
        lib.pn_condition_set_description(cond, description.encode("utf-8"))
    if info is not None:
        data_put(lib.pn_condition_info(cond), info)


def copy_condition(src: Any, dst: Any) -> None:
    found = get_condition(src)
    if found is not None:
        set_condition(dst, *found)


def symbols(values: list[str]) -> list[symbol]:
    return [symbol(v) for v in values]
