"""Where webhooks may go. A webhook is a request the registry's network makes on an admin's
behalf, so it may reach only globally routable addresses, unless an operator lists the network in
LORAPLANE_WEBHOOK_ALLOWED_NETWORKS. A URL is checked when its webhook is created and again before
every delivery, which resolves the name once and then connects to exactly the addresses checked
here (sending.py): a name that answers differently the second time (DNS rebinding) gains nothing."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Carrier-grade NAT, where some clouds serve instance metadata: refused even where an older
# `is_global` would let it through (Python 3.11 also calls multicast and NAT64 global).
SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
# NAT64: the IPv4 address in the last 32 bits is where the packets really go.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

log = logging.getLogger(__name__)


def address_refusal(written: str, allowed: list[Network]) -> str | None:
    """Why `written` (an IP address) may not be reached, or None. Raises ValueError for a name."""
    why = _internal_because(ipaddress.ip_address(written), allowed)
    return None if why is None else f"{written} is an internal address{why}"


def url_refusal(url: str, allowed: list[Network]) -> str | None:
    """For creation: the host as written, or every address its name resolves to now. A name that
    does not resolve yet is accepted: every delivery resolves and checks it again."""
    host = urlsplit(url).hostname or ""
    try:
        addresses = resolve(host, _port(url))
    except OSError:
        return None
    return resolved_refusal(host, addresses, allowed)


def resolved_refusal(host: str, addresses: list[str], allowed: list[Network]) -> str | None:
    """Why a delivery to `host` may not go to these addresses: any one of them refused is enough."""
    for address in addresses:
        if address == host:
            return address_refusal(address, allowed)
        why = _internal_because(ipaddress.ip_address(address), allowed)
        if why is not None:
            # The address stays in the log: told to whoever made the webhook, it would map the
            # registry's internal DNS for them.
            log.warning("webhook host %s resolves to %s, an internal address%s", host, address, why)
            return f"{host} resolves to an internal address"
    return None


def resolve(host: str, port: int) -> list[str]:
    """Every address of `host`, once. Raises OSError when there is none."""
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return [host]  # an address as written: nothing to resolve
    if host == "localhost" or host.endswith(".localhost"):
        return ["127.0.0.1", "::1"]  # loopback by definition (RFC 6761), whatever a resolver says
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise OSError(f"no address for {host}")
    return addresses


def resolved_reason(url: str, allowed: list[Network]) -> str | None:
    """Checks the addresses a name has now, without connecting to them: sending.deliver, which
    connects to exactly the checked addresses, supersedes it."""
    host = urlsplit(url).hostname or ""
    try:
        addresses = resolve(host, _port(url))
    except OSError as error:
        return f"cannot resolve {host}: {error}"
    return resolved_refusal(host, addresses, allowed)


def _internal_because(ip: Address, allowed: list[Network]) -> str | None:
    """None when `ip` may be reached; otherwise "" or why its form hides an internal address."""
    reached = ip.ipv4_mapped if ip.version == 6 else None
    if ip.version == 6 and ip in NAT64:
        reached = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if reached is not None:  # the packets go to that IPv4 address: judge it, not its IPv6 form
        return None if _internal_because(reached, allowed) is None else f" (it reaches {reached})"
    if any(ip in network for network in allowed):
        return None
    if _internal(ip):
        return ""
    for tunnel_end in _tunnel_ends(ip):
        if _internal(tunnel_end):
            return f" (it embeds {tunnel_end})"
    return None


def _internal(ip: Address) -> bool:
    return (not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified
            or ip.is_loopback or ip.is_link_local or ip.is_private
            or (ip.version == 4 and ip in SHARED_ADDRESS_SPACE))


def _tunnel_ends(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a 6to4 or Teredo address carries, which its packets may be sent to."""
    if ip.version != 6:
        return []
    ends = [ip.sixtofour] if ip.sixtofour else []
    return ends + (list(ip.teredo) if ip.teredo else [])


def _port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)
