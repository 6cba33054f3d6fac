"""One delivery attempt, pinned to the addresses that were checked. The receiver's name is
resolved once; every address is checked (destinations.py); the connection then goes to exactly
one of those addresses, while the Host header and the TLS server name (SNI, and the certificate
check) stay those of the URL. Nothing between the check and the connection resolves the name
again, so a name that answers a public address first and an internal one next (DNS rebinding)
reaches nothing it should not. No proxy from the environment is used either: a proxy would
resolve the name itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from registry.webhooks import destinations, signing
from registry.webhooks.deliveries import Send


@dataclass(frozen=True)
class Attempt:
    status: int | None
    error: str | None
    final: bool = False  # no retry can help: the address is refused


def deliver(send: Send, *, timeout_s: float, allowed: list[destinations.Network],
            resolve: Callable[[str, int], list[str]] = destinations.resolve) -> Attempt:
    url = httpx.URL(send.url)
    host = url.host
    try:
        addresses = resolve(host, url.port or (443 if url.scheme == "https" else 80))
    except OSError as error:  # DNS may be back by the next attempt
        return Attempt(None, f"cannot resolve {host}: {error}")
    refused = destinations.resolved_refusal(host, addresses, allowed)
    if refused:
        return Attempt(None, f"refused: {refused}", final=True)
    headers = {"Host": url.netloc.decode("ascii"), "Content-Type": "application/json",
               "User-Agent": "loraplane-webhooks", "X-Loraplane-Event": send.event,
               "X-Loraplane-Delivery": str(send.delivery_id),
               signing.HEADER: signing.sign(send.secret, send.body)}
    last_error = "no address"
    # trust_env=False: no proxy from the environment; the TLS context still honours SSL_CERT_FILE.
    with httpx.Client(transport=httpx.HTTPTransport(trust_env=True), trust_env=False,
                      timeout=timeout_s, follow_redirects=False) as http:
        for address in addresses:
            request = http.build_request("POST", url.copy_with(host=address), content=send.body,
                                         headers=headers, extensions={"sni_hostname": host})
            try:
                # Only the status matters: the body is never read, so a receiver cannot feed the
                # worker a large or endless one, and nothing it says is shown back to whoever
                # made the webhook.
                response = http.send(request, stream=True)
                response.close()
            except httpx.ConnectError as failure:  # the next checked address may answer
                last_error = type(failure).__name__
                continue
            except httpx.HTTPError as failure:
                return Attempt(None, type(failure).__name__)
            status = response.status_code
            return Attempt(status, None if 200 <= status < 300 else f"HTTP {status}")
    return Attempt(None, last_error)
