"""Policy: every container image is pinned to a version tag or a digest, and never ``latest``.

Called by ``validate`` for each workload (anything with a pod template). Rules:
``image-untagged`` (no tag and no digest, which pulls ``latest``; or no image at all) and
``image-latest`` (the ``latest`` tag without a digest).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpucatalog.catalog import errors
from gpucatalog.validators.static import objects
from gpucatalog.validators.static.target import Target


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


def check(t: Target) -> Iterator[errors.Finding]:
    tpl = objects.pod_template(t.obj)
    if tpl is None:
        return
    for path, container in objects.containers(tpl):
        image = container.get("image")
        if not isinstance(image, str) or not image.strip():
            yield t.finding("image-untagged", [*path, "image"], "container has no image")
            continue
        _, tag, digest = split_image(image.strip())
        if digest:
            continue  # a digest pins the content whatever the tag says
        if tag is None:
            yield t.finding(
                "image-untagged",
                [*path, "image"],
                f"image {image!r} has neither a tag nor a digest (pulls latest)",
            )
        elif tag == "latest":
            yield t.finding("image-latest", [*path, "image"], f"image {image!r} uses the moving tag 'latest'")
