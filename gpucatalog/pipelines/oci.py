"""A small OCI distribution client (registry HTTP API v2) over urllib: blobs and manifests, every
byte checked against its sha256 digest.

Called by ``publish`` (push the bundle lock artifact) and ``mirror`` (copy charts between
registries). No extra tool, no auth: aimed at the registries a cluster operator runs for
air-gapped installs. Plain HTTP is used only for loopback hosts or when asked for.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from gpucatalog.core import errors

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
_REF = re.compile(r"^oci://(?P<host>[A-Za-z0-9.-]+(?::\d+)?)(?P<path>(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)/?$")
_LOOPBACK = ("127.", "localhost", "[::1]")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Ref:
    """``oci://HOST[:PORT]/PATH``: a registry and a repository path prefix."""

    host: str
    path: str  # without leading/trailing slash; may be ""

    @property
    def url(self) -> str:
        return f"oci://{self.host}/{self.path}".rstrip("/")

    def repo(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name


def parse_ref(text: str) -> Ref:
    m = _REF.match(text)
    if not m:
        raise errors.InputError(f"bad registry reference {text!r}", field="--registry",
                                expected="oci://HOST[:PORT]/PATH with a lower-case path")
    return Ref(m.group("host"), m.group("path").strip("/"))


class RegistryError(errors.CheckFailed):
    """The registry refused or answered something other than what was asked for."""

    def __init__(self, message: str) -> None:
        super().__init__(message, [errors.Finding("registry", message)])


class DigestMismatch(errors.CheckFailed):
    def __init__(self, what: str, expected: str, got: str) -> None:
        msg = f"digest mismatch for {what}: expected {expected}, got {got}"
        super().__init__(msg, [errors.Finding("digest", msg)])


class Client:
    def __init__(self, ref: Ref, *, plain_http: bool | None = None, timeout: float = 30) -> None:
        self.ref = ref
        if plain_http is None:
            plain_http = ref.host.startswith(_LOOPBACK)
        self.base = f"{'http' if plain_http else 'https'}://{ref.host}"
        self.timeout = timeout

    def _request(self, method: str, url: str, data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        if not url.startswith("http"):
            url = self.base + url
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, body
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise RegistryError(f"cannot reach registry {self.ref.host}: {getattr(exc, 'reason', exc)}") from exc

    def _fail(self, what: str, status: int, body: bytes) -> RegistryError:
        detail = body[:300].decode(errors="replace").strip()
        return RegistryError(f"{what}: HTTP {status} from {self.ref.host}" + (f": {detail}" if detail else ""))

    def ping(self) -> None:
        status, _, body = self._request("GET", "/v2/")
        if status != 200:
            raise self._fail("registry API v2 not available", status, body)

    def has_blob(self, repo: str, digest: str) -> bool:
        status, _, _ = self._request("HEAD", f"/v2/{repo}/blobs/{digest}")
        return status == 200

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = sha256(data)
        if self.has_blob(repo, digest):
            return digest
        status, headers, body = self._request("POST", f"/v2/{repo}/blobs/uploads/", data=b"")
        if status != 202 or "location" not in headers:
            raise self._fail(f"starting upload to {repo}", status, body)
        loc = urllib.parse.urljoin(self.base + "/", headers["location"])
        sep = "&" if "?" in loc else "?"
        status, headers, body = self._request(
            "PUT", f"{loc}{sep}digest={urllib.parse.quote(digest)}", data=data,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
        if status != 201:
            raise self._fail(f"uploading blob {digest} to {repo}", status, body)
        return digest

    def get_blob(self, repo: str, digest: str) -> bytes:
        status, _, body = self._request("GET", f"/v2/{repo}/blobs/{digest}")
        if status != 200:
            raise self._fail(f"fetching blob {digest} of {repo}", status, body)
        got = sha256(body)
        if got != digest:
            raise DigestMismatch(f"blob of {repo}", digest, got)
        return body

    def put_manifest(self, repo: str, reference: str, manifest: bytes, media_type: str = MANIFEST) -> str:
        status, headers, body = self._request("PUT", f"/v2/{repo}/manifests/{reference}", data=manifest,
                                              headers={"Content-Type": media_type})
        if status != 201:
            raise self._fail(f"pushing manifest {repo}:{reference}", status, body)
        digest = sha256(manifest)
        if headers.get("docker-content-digest", digest) != digest:
            raise DigestMismatch(f"manifest {repo}:{reference}", digest, headers["docker-content-digest"])
        return digest

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, dict[str, Any], str]:
        """Returns (raw bytes, parsed, digest). A digest reference is verified against the bytes."""
        status, headers, body = self._request("GET", f"/v2/{repo}/manifests/{reference}",
                                              headers={"Accept": MANIFEST})
        if status == 404:
            raise errors.NotFoundError(f"{self.ref.host}/{repo}:{reference} not found in the registry")
        if status != 200:
            raise self._fail(f"fetching manifest {repo}:{reference}", status, body)
        digest = sha256(body)
        if reference.startswith("sha256:") and reference != digest:
            raise DigestMismatch(f"manifest {repo}@{reference}", reference, digest)
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError as exc:
            raise RegistryError(f"manifest {repo}:{reference} is not JSON") from exc
        if not isinstance(parsed, dict):
            raise RegistryError(f"manifest {repo}:{reference} is not a JSON object")
        return body, parsed, digest
