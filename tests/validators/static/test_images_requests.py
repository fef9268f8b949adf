"""Policy: pinned images and resource requests."""

from __future__ import annotations

import pytest

from gpucatalog.validators.static import PolicyConfig
from gpucatalog.validators.static.images import split_image

C0 = "spec.template.spec.containers[0]"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("nginx", ("nginx", None, None)),
        ("nginx:1.27", ("nginx", "1.27", None)),
        ("localhost:5000/team/app", ("localhost:5000/team/app", None, None)),
        ("localhost:5000/team/app:v2", ("localhost:5000/team/app", "v2", None)),
        ("ghcr.io/a/b@sha256:abc", ("ghcr.io/a/b", None, "sha256:abc")),
        ("ghcr.io/a/b:latest@sha256:abc", ("ghcr.io/a/b", "latest", "sha256:abc")),
    ],
)
def test_split_image(ref, expected):
    assert split_image(ref) == expected


def test_missing_tag(validate, deployment, where):
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example:5000/team/web"
    found = validate([deployment])
    assert where(found) == {("image-untagged", "Deployment/demo-ns/web", f"{C0}.image")}
    assert "neither a tag nor a digest" in found[0].message


def test_latest(validate, deployment, where):
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:latest"
    assert where(validate([deployment])) == {("image-latest", "Deployment/demo-ns/web", f"{C0}.image")}


def test_digest_pins_even_latest(validate, deployment):
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:latest@sha256:" + "a" * 64
    assert validate([deployment]) == []


def test_init_container_image_and_cronjob_path(validate, where):
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "initContainers": [
                                {
                                    "name": "prep",
                                    "image": "busybox",
                                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                                }
                            ],
                            "containers": [{"name": "run", "image": "tool:2.0"}],
                        }
                    }
                }
            },
        },
    }
    pod = "spec.jobTemplate.spec.template.spec"
    assert where(validate([cron])) == {
        ("image-untagged", "CronJob/demo-ns/nightly", f"{pod}.initContainers[0].image"),
        ("resource-requests", "CronJob/demo-ns/nightly", f"{pod}.containers[0].resources.requests"),
    }


def test_no_requests(validate, deployment, where):
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    del c["resources"]
    found = validate([deployment])
    assert where(found) == {("resource-requests", "Deployment/demo-ns/web", f"{C0}.resources.requests")}
    assert found[0].message == "container 'app' requests no cpu or memory"
    c["resources"] = {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}  # a limit counts
    assert validate([deployment]) == []


def test_policy_knobs(validate, deployment):
    del deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert validate([deployment], policy=PolicyConfig(disabled_rules=frozenset({"resource-requests"}))) == []
    assert validate([deployment], policy=PolicyConfig(required_requests=())) == []


def test_image_fields_of_custom_resources(validate, where):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodesets.slurm.example"},
        "spec": {
            "group": "slurm.example",
            "names": {"kind": "NodeSet", "plural": "nodesets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }
    nodeset = {
        "apiVersion": "slurm.example/v1",
        "kind": "NodeSet",
        "metadata": {"name": "gpu"},
        "spec": {
            "slurmd": {"image": "ghcr.example/slurmd:25.05"},
            "logfile": {"image": "alpine:latest"},
            "template": {"spec": {"initContainers": [{"name": "i", "image": "busybox"}]}},
        },
    }
    # Only custom resources are searched: a ConfigMap key called "image" is just data.
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"image": "nginx"}}
    assert where(validate([crd, nodeset, cm])) == {
        ("image-latest", "NodeSet/demo-ns/gpu", "spec.logfile.image"),
        ("image-untagged", "NodeSet/demo-ns/gpu", "spec.template.spec.initContainers[0].image"),
    }
