"""Compiles the router's per-message modules to C extensions with mypyc, and builds the two
written in C (router/datapath/pnfast.c, router/datapath/scanfast.c).

Everything else about the distribution is in pyproject.toml. The mypyc modules are the same
Python source, type-checked by mypy; each C module has a Python twin of its name, run instead
when `ROUTERNET_PURE=1`, which at build time skips compiling, and at run time makes the router
load the plain source (router/__init__.py).
"""

import json
import os
import zlib
from pathlib import Path

from setuptools import Extension, setup

# The modules every message passes through: the event loop, the forwarder, the section scanner
# and the link records they share, and the telemetry the data path counts into (the flow
# counters at the egress, the sampler at the ingress). Each crossing between compiled and
# interpreted code costs a conversion, so these stay together.
NATIVE = [
    "router/transport/connection.py",
    "router/core/engine.py",
    "router/datapath/forwarder.py",
    "router/datapath/interest.py",
    "router/datapath/links.py",
    "router/datapath/sections.py",
    "router/telemetry/flows.py",
    "router/telemetry/sampling.py",
]

# Extension modules written in C, each with a Python twin of the same name.
C_MODULES = ["router/datapath/pnfast", "router/datapath/scanfast"]

# What was compiled, by content: router/__init__.py refuses compiled modules in a source checkout
# once their source differs (an edit, a checkout), rather than run code that is no longer there.
# CRC-32 (zlib), not SHA-256: this guards against a forgotten rebuild, not an adversary, and
# hashlib's OpenSSL set-up would cost every router process 2 MiB.
SOURCES = Path("router/native-sources.json")


def content(source: Path) -> bytes:
    """As router/__init__.py reads it: the source, and its C source if it has one."""
    c_source = source.with_suffix(".c")
    return source.read_bytes() + (c_source.read_bytes() if c_source.exists() else b"")


ext_modules = []
if os.environ.get("ROUTERNET_PURE") != "1":
    from mypyc.build import mypycify

    ext_modules = mypycify(NATIVE, opt_level="3", group_name="router.native")
    # The data path's Proton calls and section walk in C (router/datapath/pnfast.py and
    # router/datapath/scanfast.py say why), beside their Python twins.
    ext_modules += [Extension(name.replace("/", "."), [f"{name}.c"]) for name in C_MODULES]
    compiled = {
        Path(p).relative_to("router").as_posix(): f"{zlib.crc32(content(Path(p))):08x}"
        for p in [*NATIVE, *(f"{name}.py" for name in C_MODULES)]
    }

setup(ext_modules=ext_modules)
if ext_modules:
    SOURCES.write_text(json.dumps(compiled, indent=1, sort_keys=True) + "\n")
