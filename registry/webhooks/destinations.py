"""Where webhooks may point. A webhook is a request the registry's network makes on an admin's
behalf, so by default it may not reach loopback, link-local (cloud metadata), private or other
internal addresses: checked for literal addresses when a webhook is created, and for every
address its host resolves to before each delivery."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def internal_reason(address: str, allowed: list[Network]) -> str | None:
    ip = ipaddress.ip_address(address)
    if any(ip in network for network in allowed):
        return None
    if ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_reserved or ip.is_multicast \
            or ip.is_unspecified:
        return f"{address} is an internal address"
    return None


def literal_reason(url: str, allowed: list[Network]) -> str | None:
    """For creation: refuse hosts that are internal as written (no DNS lookup here)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return internal_reason("127.0.0.1", allowed) and f"{host} is an internal address"
    try:
        return internal_reason(host, allowed)
    except ValueError:  # a name: resolved and checked before each delivery
        return None


def resolved_reason(url: str, allowed: list[Network]) -> str | None:
    """For delivery: refuse when any address the host resolves to is internal."""
    parts = urlsplit(url)
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                                   proto=socket.IPPROTO_TCP)
    except OSError as error:
        return f"cannot resolve {parts.hostname}: {error}"
    for info in infos:
        reason = internal_reason(info[4][0], allowed)
        if reason:
            return reason
    return None
