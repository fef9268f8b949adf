"""Policy: every container image is pinned to a version tag or a digest, and never ``latest``.

Called by ``validate`` for each workload (anything with a pod template) and each custom
resource: operators such as Slinky's take their images from CR fields (``spec.slurmd.image``,
an embedded pod template), so every string field named ``image`` of a custom resource is held
to the same rule. Rules:
``image-untagged`` (no tag and no digest, which pulls ``latest``; or no image at all) and
``image-latest`` (the ``latest`` tag without a digest).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpucatalog.core import errors
from gpucatalog.validators.static import objects, target


def split_image(ref: str) -> tuple[str, str | None, str | None]:
    """``reg:5000/a/b:1.2@sha256:…`` -> (``reg:5000/a/b``, ``1.2``, ``sha256:…``).

    A colon counts as a tag separator only after the last slash, so a registry port is not a tag.
    """
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag or None, digest or None


def check(t: target.Target, *, custom: bool = False) -> Iterator[errors.Finding]:
    """Findings for the containers of a workload, or every ``image`` field of a custom resource."""
    tpl = objects.pod_template(t.obj)
    if tpl is not None:
        for path, container in objects.containers(tpl):
            yield from _check_ref(t, (*path, "image"), container.get("image"))
    elif custom:
        for path, value in _image_fields(t.obj, ()):
            yield from _check_ref(t, path, value)


def _image_fields(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "image" and isinstance(v, str):
                yield (*path, k), v
            else:
                yield from _image_fields(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _image_fields(v, (*path, i))


def _check_ref(t: target.Target, path: tuple[str | int, ...], image: Any) -> Iterator[errors.Finding]:
    if not isinstance(image, str) or not image.strip():
        yield t.finding("image-untagged", path, "container has no image")
        return
    _, tag, digest = split_image(image.strip())
    if digest:
        return  # a digest pins the content whatever the tag says
    if tag is None:
        yield t.finding(
            "image-untagged", path, f"image {image!r} has neither a tag nor a digest (pulls latest)"
        )
    elif tag == "latest":
        yield t.finding("image-latest", path, f"image {image!r} uses the moving tag 'latest'")
