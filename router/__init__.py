"""Routernet's routing core: an AMQP 1.0 router driving Proton's C engine directly.

The modules every message passes through are compiled with mypyc when the package is built
(setup.py); Python then prefers them to their source. `ROUTERNET_PURE=1` in the environment
makes the router run its plain source instead (for a debugger or a line profiler, say). In a
source checkout, compiled modules built from other source than what is there now stop the
import: they would silently run code that is no longer there.
"""

import json
import os
import sys
import zlib
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    FileFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from pathlib import Path

__version__ = "0.1.0"


def _content(source: Path) -> bytes:
    """What a compiled module was built from: its source, and its C source when it has one
    (router/datapath/pnfast.c, whose Python twin is its reference)."""
    c_source = source.with_suffix(".c")
    return source.read_bytes() + (c_source.read_bytes() if c_source.exists() else b"")


def _stale(package: Path) -> list[str]:
    """The sources whose compiled module was built from other content (source checkouts only)."""
    if not (package.parent / "setup.py").exists():
        return []  # installed: the wheel's source and modules were built together
    compiled = [
        source
        for suffix in EXTENSION_SUFFIXES
        for binary in package.rglob(f"*{suffix}")
        if (source := binary.with_name(binary.name.removesuffix(suffix) + ".py")).exists()
    ]
    if not compiled:
        return []
    try:
        built = json.loads((package / "native-sources.json").read_text())
    except (OSError, ValueError):
        built = {}
    names = {source: source.relative_to(package).as_posix() for source in compiled}
    return [
        name + (f" or {source.with_suffix('.c').name}" if source.with_suffix(".c").exists() else "")
        for source, name in names.items()
        if built.get(name) != f"{zlib.crc32(_content(source)):08x}"  # as setup.py writes it
    ]


if os.environ.get("ROUTERNET_PURE") == "1":
    # This package's directories and its subpackages' get a finder without the
    # extension-module loader.
    for _entry in __path__:
        for _init in Path(_entry).rglob("__init__.py"):
            sys.path_importer_cache[str(_init.parent)] = FileFinder(
                str(_init.parent),
                (SourceFileLoader, SOURCE_SUFFIXES),
                (SourcelessFileLoader, BYTECODE_SUFFIXES),
            )
elif _stale_sources := _stale(Path(__file__).parent):
    raise ImportError(
        f"router: {', '.join(sorted(_stale_sources))} changed since compiled: run `make native` "
        "to rebuild, or set ROUTERNET_PURE=1 to run the source"
    )
