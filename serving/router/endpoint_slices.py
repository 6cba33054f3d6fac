"""Where each node's vLLM is, as Kubernetes lists it: the EndpointSlices of the pool's headless
Service. The platform says which pod is behind which address, so a node's own report never
decides where tenants' prompts go (DESIGN.md, trust model).

A node is a pod: its id is the endpoint's targetRef name, the same id that the pod's agent
reports under (its service-account token names the pod). An endpoint receives traffic only while
it is ready (an absent condition means ready) and not terminating. A pod listed in several
slices, as while the controller moves endpoints between them, is taken from the first slice by
name where it is ready."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from lightkube.models.discovery_v1 import Endpoint
from lightkube.resources.discovery_v1 import EndpointSlice

SERVICE_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class PodEndpoint:
    node_id: str  # the pod's name
    url: str  # scheme://address:port
    routable: bool  # ready and not terminating


def pod_endpoints(slice_: EndpointSlice, port_name: str, scheme: str) -> tuple[PodEndpoint, ...]:
    """The endpoints of `slice_` that are pods with an address, at the port named `port_name`;
    none when the slice has no such port."""
    port = next((p.port for p in slice_.ports or () if p.name == port_name and p.port), None)
    if port is None:
        return ()
    namespace = slice_.metadata.namespace if slice_.metadata else None
    found = []
    for endpoint in slice_.endpoints or ():
        ref = endpoint.targetRef
        if ref is None or ref.kind != "Pod" or not ref.name or not endpoint.addresses:
            continue
        if ref.namespace and namespace and ref.namespace != namespace:
            continue  # a pod's name names it only in its own namespace
        found.append(PodEndpoint(ref.name, f"{scheme}://{_host(endpoint.addresses[0])}:{port}",
                                 _routable(endpoint)))
    return tuple(found)


def addresses(slices: Mapping[str, tuple[PodEndpoint, ...]]) -> dict[str, str]:
    """node id -> address of every routable pod, merged over the service's slices (by name)."""
    merged: dict[str, str] = {}
    for name in sorted(slices):
        for endpoint in slices[name]:
            if endpoint.routable:
                merged.setdefault(endpoint.node_id, endpoint.url)
    return merged


def _routable(endpoint: Endpoint) -> bool:
    conditions = endpoint.conditions
    if conditions is None:
        return True
    return conditions.ready is not False and not conditions.terminating


def _host(address: str) -> str:
    try:
        return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address  # addressType FQDN
