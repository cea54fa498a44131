"""Writes router/config/records.py, the router's configuration as plain records, from the pydantic
models of router/config/models.py: `make config-records`; tests/test_config_records.py fails when
the file is stale. Why records at all: router/config/views.py."""

from __future__ import annotations

import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from router.config import views as configviews
from router.config.models import RouterConfig

TARGET = Path(__file__).with_name("records.py")

HEADER = '''"""The router's configuration as plain records: what a router process runs on,
built from the validated configuration a child process printed (router/config/check.py).
GENERATED from the pydantic models (router/config/models.py and its sections) by
`make config-records`; do not edit. Why: router/config/views.py."""

from __future__ import annotations

from typing import Literal

from router.config.views import (
{views}
)
'''


def models(root: type[BaseModel] = RouterConfig) -> list[type[BaseModel]]:
    """Every model under ``root``, each after the models its fields hold."""
    ordered: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in ordered:
            return
        for field in model.model_fields.values():
            for nested in _models_in(field.annotation):
                visit(nested)
        ordered.append(model)

    visit(root)
    return ordered


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def render_type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Annotated:  # a validator's wrapper inside a union: the type it wraps
        return render_type(args[0])
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(render_type(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(render_type(a) for a in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    raise TypeError(f"no record type for {annotation!r}")


def _nested(annotation: Any) -> tuple[str, str] | None:
    """How a field holds records: ``one`` (or None), ``list`` or ``dict`` of which class."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("one", annotation.__name__)
    if origin in (typing.Union, types.UnionType):
        found = [n for n in (_nested(a) for a in args if a is not type(None)) if n is not None]
        return found[0] if found else None
    if origin is list and _models_in(args[0]):
        return ("list", args[0].__name__)
    if origin is dict and _models_in(args[1]):
        return ("dict", args[1].__name__)
    return None


def _views(model: type[BaseModel]) -> list[str]:
    return [
        base.__name__
        for base in model.__mro__
        if base.__module__ == configviews.__name__
        and base.__name__.endswith("View")
        and not any(
            other is not base and issubclass(other, base) and other.__module__ == base.__module__
            for other in model.__mro__
        )
    ]


def render_class(model: type[BaseModel]) -> str:
    names = list(model.model_fields)
    private = list(model.__private_attributes__)
    bases = [*_views(model), "RecordBase"]
    lines = [f"class {model.__name__}({', '.join(bases)}):"]
    lines.append(f'    """As {model.__module__}.{model.__name__}."""')
    lines.append("")
    lines.append(f"    __slots__ = {tuple(sorted(names + private))!r}")
    lines.append(f"    _FIELDS = {tuple(names)!r}")
    if private:
        lines.append(f"    _PRIVATE = {tuple(private)!r}")
    nested = {n: _nested(f.annotation) for n, f in model.model_fields.items()}
    if any(nested.values()):
        items = "".join(f"({n!r}, {k!r}, {c}), " for n, (k, c) in _present(nested))
        lines.append(f"    _NESTED = ({items})")
    params: list[str] = []
    body: list[str] = []
    for name, field in model.model_fields.items():
        kind = render_type(field.annotation)
        if field.default_factory is not None:
            value = field.default_factory()  # type: ignore[call-arg]
            params.append(f"{name}: {kind} | None = None")
            body.append(f"self.{name}: {kind} = {_literal(value)} if {name} is None else {name}")
        elif field.default is PydanticUndefined:
            params.append(f"{name}: {kind}")
            body.append(f"self.{name} = {name}")
        else:
            params.append(f"{name}: {kind} = {_literal(field.default)}")
            body.append(f"self.{name} = {name}")
    hints = typing.get_type_hints(model)
    for name, attr in model.__private_attributes__.items():
        body.append(f"self.{name}: {render_type(hints[name])} = {_literal(attr.default)}")
    lines.append("")
    lines.append(f"    def __init__(self, *, {', '.join(params)}) -> None:")
    lines += [f"        {line}" for line in body]
    return "\n".join(lines)


def _present(nested: dict[str, tuple[str, str] | None]) -> list[tuple[str, tuple[str, str]]]:
    return [(name, how) for name, how in nested.items() if how is not None]


def _literal(value: Any) -> str:
    if isinstance(value, BaseModel):
        if value != type(value)():
            raise TypeError(f"default {value!r} is not {type(value).__name__}()")
        return f"{type(value).__name__}()"
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return repr(value)
    raise TypeError(f"no literal for default {value!r}")


def render() -> str:
    """The module's text, formatted as `make fmt` would (ruff, this project's settings)."""
    ordered = models()
    views = sorted({view for model in ordered for view in _views(model)} | {"RecordBase"})
    classes = "\n\n\n".join(render_class(model) for model in ordered)
    header = HEADER.format(views="".join(f"    {view},\n" for view in views).rstrip("\n"))
    ruff = Path(sys.executable).with_name("ruff")
    formatted = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(TARGET), "-"],
        input=f"{header}\n\n{classes}\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


def main() -> int:
    TARGET.write_text(render())
    print(f"wrote {TARGET}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
