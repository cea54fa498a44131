"""The chart installed with its CRDs by helm, the operator Ready, the images in the cluster."""

from __future__ import annotations

import json

import kube
from conftest import CRDS, IMAGES, RELEASE, say


def _node_images() -> dict[str, int]:
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json"))["items"]
    return {
        name.removeprefix("docker.io/"): image.get("sizeBytes", 0)
        for node in nodes
        for image in node["status"].get("images") or []
        for name in image.get("names") or []
    }


def test_the_images_are_in_the_cluster(images: dict[str, str]) -> None:
    # The kubelet lists a node's images in its status at its next status update, which may come
    # a while after an image was imported (the pipeline's, the largest, was missing once).
    kube.wait_for(
        "every image listed in a node's status",
        lambda: all(image in _node_images() for image in images.values()),
        timeout=120,
    )
    sizes = _node_images()
    for image in images.values():
        assert image in sizes, f"{image} is not on any node: {sorted(sizes)}"
        say(f"{image}: {sizes[image] / 1e6:.0f} MB as the node reports it")


def test_helm_installs_the_crds_and_the_operator_is_ready(operator: str) -> None:
    # The suite removed them first (conftest.clean): these are the ones helm installed.
    for crd in CRDS:
        found = kube.get("", "customresourcedefinition", f"{crd}.routernet.io")
        assert kube.condition(found, "Established").get("status") == "True", crd
    deployment = kube.get(operator, "deployment", f"{RELEASE}-routernet")
    assert deployment["status"].get("readyReplicas") == 1
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGES["operator"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ROUTERNET_ROUTER_IMAGE"] == IMAGES["router"]
    assert env["ROUTERNET_COLLECTOR_IMAGE"] == IMAGES["collector"]
    say(f"4 CRDs established; operator {container['image']} Ready in namespace {operator}")
