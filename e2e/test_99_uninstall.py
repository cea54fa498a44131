"""helm uninstall, then the namespaces deleted: nothing waits on a finalizer, with or without
the operator running. Last: CRDs go too, so the next run starts clean."""

from __future__ import annotations

import json
import time

import kube
from conftest import CRDS, PREFIX, RELEASE, SYSTEM, say


def test_uninstall_and_namespace_deletion_leave_nothing_stuck(operator: str) -> None:
    kinds = ",".join(f"{c}.routernet.io" for c in CRDS)
    objects = json.loads(kube.kubectl("get", kinds, "-A", "-o", "json"))["items"]
    with_finalizers = [
        f"{o['kind']} {o['metadata']['namespace']}/{o['metadata']['name']}"
        for o in objects
        if o["metadata"].get("finalizers")
    ]
    assert with_finalizers == []
    started = time.monotonic()
    kube.run(["helm", "uninstall", RELEASE, "-n", SYSTEM, "--wait"], timeout=180)
    namespaces = [
        n.removeprefix("namespace/")
        for n in kube.kubectl("get", "namespaces", "-o", "name").split()
        if n.removeprefix("namespace/").startswith(PREFIX)
    ]
    kube.kubectl("delete", "namespace", *namespaces, "--wait=true", timeout=300)
    left = [n for n in namespaces if kube.exists("", "namespace", n)]
    assert left == []
    crds = [f"customresourcedefinition/{c}.routernet.io" for c in CRDS]
    kube.kubectl("delete", *crds, "--wait=true", timeout=120)
    say(
        f"{len(objects)} Routernet objects, none with a finalizer; helm uninstall, then"
        f" {len(namespaces)} namespaces and the CRDs deleted in {time.monotonic() - started:.0f} s"
    )
