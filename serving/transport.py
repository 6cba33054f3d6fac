"""The agent and the router send their bearer token to the registry on every request: over
plain http:// to another host, anyone on the path reads it. They refuse such a registry unless
the operator opts in by name, and then say so loudly at every start."""

from __future__ import annotations

import ipaddress
import logging

from pydantic import AnyHttpUrl

log = logging.getLogger("loraplane")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_registry_transport(url: AnyHttpUrl, allow_insecure: bool, variable: str) -> None:
    """Raise ValueError for http:// to a host other than this one, unless allowed."""
    if url.scheme == "http" and not is_loopback(url.host) and not allow_insecure:
        raise ValueError(
            f"the registry is http:// on {url.host}, another host: this process's token would "
            f"cross the network in clear. Use https://, or, only on a network you trust end to "
            f"end, set {variable}=true")


def warn_if_insecure(url: AnyHttpUrl, allowed_by: str) -> None:
    if url.scheme == "http" and not is_loopback(url.host):
        log.warning("INSECURE: the registry is plain http:// on %s (allowed by %s): this process's "
                    "token crosses the network in clear", url.host, allowed_by)
