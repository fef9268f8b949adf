"""Install and uninstall a rendered bundle into a cluster through Helm (pyhelm3), waiting for
readiness. Components that do not wait for one another (``installorder``: dependsOn, webhooks,
namespace) are installed at the same time; a failure leaves the components not yet started out.
Uninstall goes in reverse bundle order, one at a time. Called by ``catalog install/uninstall`` and
certify.

A component is installed from its chart with exactly the values the render used, so the release
matches the rendered digest. A component with a kustomize overlay is installed from its rendered
manifests (wrapped as a one-template chart), because Helm cannot apply the overlay itself. Each
release's description says what vouched for it (a channel's certificate, or --allow-uncertified).

``target`` checks the cluster before anything is applied: the kubeconfig must exist, parse,
name a server, and that server must answer. Otherwise it is bad input (exit 2); helm and the
Kubernetes client would otherwise fall back to ``localhost:8080`` for an empty file.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyhelm3
import pyhelm3.errors
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpucatalog.catalog import helmcmd, installorder, readiness, render
from gpucatalog.core import errors, kubeapi
from gpucatalog.toolchain import build

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Installed:
    component: str
    release: str
    namespace: str
    revision: int
    seconds: float
    # "ready", "simulated" (a gate that cannot be met by simulated pods, not checked), "not ready:
    # …" (only with a ``not_ready`` handler), or "" without gates
    readiness: str = ""


def kubeconfig_path(given: Path | None) -> Path:
    """--kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config; it must exist."""
    if given is not None:
        path, source = given.expanduser(), "--kubeconfig"
    elif os.environ.get("KUBECONFIG", "").strip():
        path, source = Path(os.environ["KUBECONFIG"].split(os.pathsep)[0]).expanduser(), "$KUBECONFIG"
    else:
        path, source = Path.home() / ".kube" / "config", "~/.kube/config (no --kubeconfig or $KUBECONFIG)"
    if not path.is_file():
        raise errors.NotFoundError(f"kubeconfig not found: {path}", field=source,
                                   expected="a kubeconfig file of the target cluster")
    return path


def target(given: Path | None, timeout_s: float = 10, field: str = "--kubeconfig") -> tuple[Path, str]:
    """(kubeconfig, API server URL) of a cluster that answers; InputError (exit 2) naming what is
    wrong with the kubeconfig otherwise (``field``: the option that named it)."""
    import urllib3.exceptions
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    path = kubeconfig_path(given)
    if not path.read_bytes().strip():
        raise errors.InputError("kubeconfig is empty; refusing to fall back to localhost:8080", path=str(path),
                                field=field)
    try:
        api = kubeapi.client_for(path, retries=0)
    except (ConfigException, yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        raise errors.InputError(f"not a usable kubeconfig: {str(exc).splitlines()[0][:200]}", path=str(path),
                                field=field) from exc
    host = str(api.configuration.host or "")
    if not host or host.rstrip("/") in ("http://localhost", "http://localhost:8080"):
        raise errors.InputError(f"kubeconfig names no API server (would use {host or 'nothing'})", path=str(path),
                                field=field)
    try:
        client.VersionApi(api).get_code(_request_timeout=timeout_s)
    except ApiException as exc:
        raise errors.InputError(f"API server {host} refused the kubeconfig's credentials: HTTP {exc.status} {exc.reason}",
                                path=str(path), field=field) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.InputError(f"API server {host} is unreachable: {str(exc).splitlines()[0][:200]}",
                                path=str(path), field=field) from exc
    return path, host


def _client(kubeconfig: Path | None) -> pyhelm3.Client:
    helm = str(build.ensure("helm"))
    return pyhelm3.Client(command=helmcmd.Command(helm, kubeconfig), executable=helm)


async def _pods_before(comp: render.RenderedComponent, kubeconfig: Path | None) -> set[str] | None:
    """The component's workload pods before its install (None: the API server did not say)."""
    try:
        return await asyncio.to_thread(readiness.pod_uids, kubeapi.client_for(kubeconfig), comp.namespace, comp.objects)
    except (HTTPError, OSError, ApiException):
        return None


async def _crash_loops(comp: render.RenderedComponent, kubeconfig: Path | None, before: set[str] | None,
                       interval: float = 2.0) -> list[str]:
    """Returns once a workload pod of ``comp`` that was not there ``before`` crash-loops
    (``readiness.crash_loops``: a rollback replaces crashing pods, which crash on meanwhile); runs
    until cancelled otherwise. An API server that does not answer is asked again."""
    if before is None:
        return await asyncio.Future()  # old pods cannot be told from new ones: Helm's timeout decides
    api = kubeapi.client_for(kubeconfig)
    while True:
        try:
            found = await asyncio.to_thread(readiness.crash_loops, api, comp.namespace, comp.objects, before=before)
        except (HTTPError, OSError, ApiException):
            found = []
        if found:
            return found
        await asyncio.sleep(interval)


def _wrap_rendered(comp: render.RenderedComponent, tmp: Path) -> Path:
    """A chart whose only template is the component's rendered (overlaid) manifests."""
    d = tmp / comp.name
    (d / "templates").mkdir(parents=True)
    (d / "Chart.yaml").write_text(f"apiVersion: v2\nname: {comp.name}\nversion: 0.0.0-rendered\n")
    # Escape template delimiters: the manifests are final, helm must not evaluate them again.
    text = comp.manifest_text.replace("{{", '{{ "{{" }}')
    (d / "templates" / "rendered.yaml").write_text(text)
    return d


NotReadyHandler = Callable[[readiness.NotReady], None]


async def _install(
    rb: render.RenderedBundle, kubeconfig: Path | None, timeout_s: int, say: Progress, gates: bool,
    ready_timeout_s: float, not_ready: NotReadyHandler | None, description: str | None,
) -> list[Installed]:
    client = _client(kubeconfig)
    waits = installorder.waits_for(rb.components)
    tasks: dict[str, asyncio.Task[Installed]] = {}
    failed = asyncio.Event()

    async def one(comp: render.RenderedComponent, tmp: Path) -> Installed:
        for dep in waits[comp.name]:
            await tasks[dep]  # a failed dependency ends this one with the same error, before it starts
        if failed.is_set():
            raise _NotStarted(comp.name)
        try:
            return await _install_one(client, rb, comp, tmp, timeout_s, say, gates, ready_timeout_s, not_ready,
                                      description, kubeconfig)
        except BaseException:
            failed.set()  # components not started yet stay out: nothing more is applied
            raise

    with tempfile.TemporaryDirectory(prefix="catalog-install-") as tmp:
        # the bundle's order puts dependencies first, so each task finds those it awaits
        for comp in rb.components:
            tasks[comp.name] = asyncio.ensure_future(one(comp, Path(tmp)))
        outcomes = await asyncio.gather(*tasks.values(), return_exceptions=True)
    for outcome in outcomes:  # the first real failure in the bundle's order
        if isinstance(outcome, BaseException) and not isinstance(outcome, _NotStarted):
            raise outcome
    return [o for o in outcomes if isinstance(o, Installed)]


class _NotStarted(Exception):
    """A component left out because another one failed first."""


async def _install_one(
    client: pyhelm3.Client, rb: render.RenderedBundle, comp: render.RenderedComponent, tmp: Path, timeout_s: int,
    say: Progress, gates: bool, ready_timeout_s: float, not_ready: NotReadyHandler | None, description: str | None,
    kubeconfig: Path | None,
) -> Installed:
    t0 = time.monotonic()
    overlaid = rb.lock_component(comp.name).get("kustomize") is not None
    ref = _wrap_rendered(comp, tmp) if overlaid else Path(comp.chart_dir)
    say(f"installing {comp.name}@{comp.version} into namespace {comp.namespace}")
    chart = await client.get_chart(ref)
    before = await _pods_before(comp, kubeconfig)
    helm = asyncio.ensure_future(client.install_or_upgrade_release(
        comp.release,
        chart,
        {} if overlaid else comp.values,
        namespace=comp.namespace,
        create_namespace=True,
        wait=True,
        timeout=f"{timeout_s}s",
        description=description,
        # the bundle's values are the whole truth: given none, Helm would copy the
        # previous release's (a rollback to a version that sets no values kept the newer one's)
        reset_values=True,
    ))
    watch = asyncio.ensure_future(_crash_loops(comp, kubeconfig, before))
    await asyncio.wait({helm, watch}, return_when=asyncio.FIRST_COMPLETED)
    if not helm.done():
        # a controller failing at every start never gets ready: end Helm's wait now (Helm records
        # the release as failed) rather than at its timeout
        helm.cancel()
        await asyncio.gather(helm, return_exceptions=True)
        raise errors.CheckFailed(
            f"install of {comp.name} (release {comp.release} in {comp.namespace}) failed: "
            + "; ".join(watch.result()) + "; Helm's wait was stopped and the release marked failed")
    watch.cancel()
    try:
        rev = helm.result()
    except pyhelm3.errors.Error as exc:
        raise errors.CheckFailed(
            f"install of {comp.name} (release {comp.release} in {comp.namespace}) failed: "
            + (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)).strip()
        ) from exc
    state = ""
    if gates:
        say(f"waiting for {comp.name} to report ready (up to {ready_timeout_s:.0f}s)")
        try:
            # in a thread: the other components' installs go on meanwhile
            state = await asyncio.to_thread(readiness.wait, comp.name, comp.namespace, kubeconfig, ready_timeout_s,
                                            objects=comp.objects, skip_simulated=not_ready is not None)
        except readiness.NotReady as exc:
            if not_ready is None:
                raise
            not_ready(exc)
            state = f"not ready: {exc}"
        if state == "simulated":
            say(f"{comp.name}: its pods are only simulated here; its readiness gate is not checked")
    seconds = time.monotonic() - t0
    say(f"{comp.name} installed in {seconds:.1f}s")
    return Installed(comp.name, comp.release, comp.namespace, rev.revision, seconds, state)


def install(
    rb: render.RenderedBundle,
    kubeconfig: Path | None,
    *,
    timeout_s: int = 300,
    progress: Progress | None = None,
    gates: bool = True,
    ready_timeout_s: float | None = None,
    not_ready: NotReadyHandler | None = None,
    description: str | None = None,
) -> list[Installed]:
    """Install (or upgrade: re-running is idempotent) every component, each after those it waits
    for (``installorder.waits_for``), the others side by side. With ``gates``, each component
    must report ready (``readiness.wait``, up to ``ready_timeout_s``, default ``timeout_s``)
    before a component that waits for it starts: ``NotReady`` ends the install, unless a
    ``not_ready`` handler takes it (certification: it records the failure and goes on, and does
    not wait for a gate whose pods are only simulated, which it records as such).
    ``description`` is recorded on every release (``helm history`` shows it)."""
    return asyncio.run(_install(rb, kubeconfig, timeout_s, progress or (lambda _m: None), gates,
                                float(timeout_s if ready_timeout_s is None else ready_timeout_s), not_ready,
                                description))


async def _uninstall(rb: render.RenderedBundle, kubeconfig: Path | None, say: Progress) -> list[str]:
    client = _client(kubeconfig)
    removed = []
    for comp in reversed(rb.components):
        try:
            await client.uninstall_release(comp.release, namespace=comp.namespace, wait=True)
            removed.append(comp.name)
            say(f"uninstalled {comp.name}")
        except pyhelm3.errors.ReleaseNotFoundError:
            say(f"{comp.name}: not installed")
    return removed


def uninstall(rb: render.RenderedBundle, kubeconfig: Path | None, *, progress: Progress | None = None) -> list[str]:
    """Remove every component's release in reverse order; missing releases are skipped."""
    return asyncio.run(_uninstall(rb, kubeconfig, progress or (lambda _m: None)))


def helm_skipped_crds(comp: render.RenderedComponent) -> list[dict[str, Any]]:
    """The component's CRDs that come from its chart's ``crds/`` folder: Helm installs those once
    and never upgrades them."""
    import yaml

    crd_dir = Path(comp.chart_dir) / "crds"
    if not crd_dir.is_dir():
        return []
    names = set()
    for f in sorted(crd_dir.glob("*.y*ml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                names.add((doc.get("metadata") or {}).get("name"))
    return [o for o in comp.objects if o.get("kind") == "CustomResourceDefinition" and o["metadata"]["name"] in names]


def apply_crds(rb: render.RenderedBundle, kubeconfig: Path, progress: Progress | None = None) -> list[str]:
    """Apply, server-side and in the bundle's order, every CRD Helm would leave at its old version
    on upgrade (``helm_skipped_crds``); returns their names. Called before an upgrade's Helm
    releases, so the new controllers and custom objects meet the new schemas."""
    import yaml

    from gpucatalog.core import executor

    say = progress or (lambda _m: None)
    applied: list[str] = []
    for comp in rb.components:
        crds = helm_skipped_crds(comp)
        if not crds:
            continue
        say(f"applying {len(crds)} CRDs of {comp.name}@{comp.version} server-side")
        executor.run([build.ensure("kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side",
                      "--force-conflicts", "--field-manager=gpu-catalog", "-f", "-"],
                     input=yaml.safe_dump_all(crds, sort_keys=False), timeout=120)
        applied += [o["metadata"]["name"] for o in crds]
    return applied


def plan_lines(rb: render.RenderedBundle) -> list[str]:
    """What ``--dry-run`` prints: the ordered plan."""
    lines = [f"plan for {rb.ref} (profile {rb.profile}, digest {rb.digest}):"]
    for i, c in enumerate(rb.components, 1):
        kinds: dict[str, Any] = {}
        for o in c.objects:
            kinds[o.get("kind", "?")] = kinds.get(o.get("kind", "?"), 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        lines.append(f"  {i}. helm upgrade --install {c.release} ({c.name}@{c.version}) -n {c.namespace}: {summary}")
    return lines
