"""make e2e: Routernet on a real Kubernetes cluster, as a user installs and uses it.

The cluster is the one ``KUBECONFIG`` names (with the kit: ``eval "$(kube-aid env)"`` after
``kube-aid up``); kubectl and helm come from PATH. The images are built from this checkout and
loaded into the cluster's runtime by ``ROUTERNET_E2E_LOAD_IMAGES`` (a shell command; ``skip``
to use what is loaded), by default ``kube-aid images`` (which builds the last commit, as
committed) when kube-aid is on PATH.

The suite takes the cluster for itself: it removes what an earlier run left (its namespaces,
its Helm release, Routernet's CRDs) and refuses to start when Routernet objects live in other
namespaces. The modules run in the order of their names, each step printing what it checked;
a failure prints every pod of the suite's namespaces with its phase, why it is not ready and
its last log lines.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import kube
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# tests/test_tls.py makes throwaway certificates with openssl: the TLS steps use it too.
sys.path.insert(0, str(ROOT / "tests"))

VERSION = str(yaml.safe_load((ROOT / "helm/routernet/Chart.yaml").read_text())["appVersion"])
IMAGES = {
    name: f"routernet/{name}:{VERSION}" for name in ("router", "operator", "collector", "pipeline")
}
RELEASE = "rn-e2e"
SYSTEM = "rn-e2e-system"
NETWORK = "rn-e2e"
"""The examples/ network's namespace."""
PREFIX = "rn-e2e"
"""Every namespace of the suite starts with it."""
CRDS = ("routers", "addresses", "linkroutes", "gateways")


def pytest_report_header() -> list[str]:
    return [f"cluster: KUBECONFIG={os.environ.get('KUBECONFIG', '(default)')}", f"images: {IMAGES}"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed and call.when == "call":
        namespaces = kube.run(["kubectl", "get", "namespaces", "-o", "name"], check=False).stdout
        ours = [n.removeprefix("namespace/") for n in namespaces.split()]
        text = "\n".join(kube.diagnose(n) for n in ours if n.startswith(PREFIX))
        report.sections.append(("where the pods stand", text))
    return report


def say(text: str) -> None:
    print(f"  {text}", flush=True)


@pytest.fixture(scope="session", autouse=True)
def cluster() -> None:
    done = kube.run(["kubectl", "get", "--raw", "/readyz"], check=False, timeout=15)
    if done.returncode != 0:
        pytest.exit(
            "make e2e needs a cluster: KUBECONFIG names none that answers"
            f' ({done.stderr.strip()}); with the kit: kube-aid up; eval "$(kube-aid env)"',
            returncode=2,
        )
    kinds = ",".join(f"{c}.routernet.io" for c in CRDS)
    others = kube.run(
        ["kubectl", "get", kinds, "-A", "--no-headers", "-o=custom-columns=NS:.metadata.namespace"],
        check=False,
    ).stdout.split()
    foreign = sorted({ns for ns in others if not ns.startswith(PREFIX)})
    if foreign:
        pytest.exit(
            f"Routernet objects live in namespaces {', '.join(foreign)}: make e2e removes"
            " Routernet's CRDs, so it runs only on a cluster of its own",
            returncode=2,
        )


def clean() -> None:
    """What an earlier run left: the release, the namespaces, the CRDs."""
    kube.run(["helm", "uninstall", RELEASE, "-n", SYSTEM, "--wait"], check=False, timeout=120)
    names = kube.kubectl("get", "namespaces", "-o", "name").split()
    ours = [n for n in names if n.removeprefix("namespace/").startswith(PREFIX)]
    if ours:
        kube.kubectl("delete", *ours, "--wait=true", timeout=300)
    crds = [f"customresourcedefinition/{c}.routernet.io" for c in CRDS]
    kube.kubectl("delete", *crds, "--ignore-not-found", "--wait=true", timeout=120)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """Built from this checkout and loaded into the cluster's runtime."""
    command = os.environ.get("ROUTERNET_E2E_LOAD_IMAGES")
    if command is None and shutil.which("kube-aid"):
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        if dirty:
            say("note: uncommitted changes are not in the images (kube-aid builds the last commit)")
        command = 'DOCKERFILES="router operator collector pipeline" kube-aid images'
    if command is None:
        pytest.exit(
            "set ROUTERNET_E2E_LOAD_IMAGES to a command that builds and loads "
            + ", ".join(IMAGES.values())
            + " into the cluster (docs/operator.md: quick start), or put kube-aid on PATH",
            returncode=2,
        )
    if command != "skip":
        started = time.monotonic()
        say(f"images: {command}")
        done = subprocess.run(
            command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=1800,
            env={**os.environ, "ROUTERNET_IMAGES": " ".join(IMAGES.values())},
        )  # fmt: skip
        assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        say(f"images built and loaded in {time.monotonic() - started:.0f} s")
    return IMAGES


@pytest.fixture(scope="session")
def operator(images: dict[str, str]) -> str:
    """The chart installed with its CRDs, the operator Ready: its namespace."""
    clean()
    started = time.monotonic()
    # The examples' namespace first: the chart gives Spark's driver an account there.
    kube.kubectl("create", "namespace", NETWORK)
    command = [
        "helm", "install", RELEASE, str(ROOT / "helm/routernet"), "-n", SYSTEM,
        "--create-namespace", "--wait", "--timeout", "3m",
        "--set", "spark.enabled=true", "--set", f"spark.namespaces={{{NETWORK}}}",
    ]  # fmt: skip
    kube.run(command, timeout=240)
    say(f"{shlex.join(command[:6])}: operator Ready in {time.monotonic() - started:.0f} s")
    return SYSTEM


@pytest.fixture(scope="session")
def network(operator: str) -> Iterator[str]:
    """examples/routers.yaml and examples/addresses.yaml applied in NETWORK, as the README
    says; every Router Ready."""
    started = time.monotonic()
    for name in ("routers.yaml", "addresses.yaml"):
        kube.apply(NETWORK, (ROOT / "examples" / name).read_text())
    kube.wait_for(
        "every example Router Ready",
        lambda: kube.ready_routers(NETWORK, ["core", "edge"]),
        timeout=240,
    )
    say(
        f"examples/ applied in {NETWORK}: core and edge Ready in {time.monotonic() - started:.0f} s"
    )
    yield NETWORK


@pytest.fixture(scope="session")
def clients(network: str, images: dict[str, str]) -> str:
    """A ConfigMap with e2e/clients/ for client pods to mount."""
    kube.kubectl(
        "-n", network, "create", "configmap", "e2e-clients",
        f"--from-file={ROOT / 'e2e/clients'}",
    )  # fmt: skip
    return "e2e-clients"
