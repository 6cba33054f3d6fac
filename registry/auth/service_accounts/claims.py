"""What a verified service-account token says about its pod: the `kubernetes.io` claims, checked
for shape, and the node they make of it. The node id is the pod's name, as the cluster wrote it,
never rewritten: a name that is not a node id is refused, saying so."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from registry.errors import Forbidden, Unauthorized
from registry.names import NAME_PATTERN

DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$")
UID = re.compile(r"^[0-9a-fA-F-]{1,64}$")


HINT = "Present the pod's projected service-account token (LORAPLANE_AGENT_TOKEN_FILE)."


class TokenRefused(Unauthorized):
    code = "k8s_token_refused"


@dataclass(frozen=True)
class Pod:
    namespace: str
    service_account: str
    name: str
    uid: str

    @property
    def account(self) -> str:
        """As LORAPLANE_K8S_SERVICE_ACCOUNTS names it."""
        return f"{self.namespace}/{self.service_account}"


def pod_of(claims: dict[str, Any]) -> Pod:
    """The pod the token was issued to; TokenRefused when the claims are not those of a pod's
    token (a token from `kubectl create token` is bound to no pod)."""
    bound = claims.get("kubernetes.io")
    if not isinstance(bound, dict):
        raise refused("it carries no \"kubernetes.io\" claims", "not_a_service_account_token")
    namespace = bound.get("namespace")
    account, pod = _part(bound, "serviceaccount"), _part(bound, "pod")
    if pod is None:
        raise refused("it is bound to no pod (a token made by `kubectl create token` or a "
                       "TokenRequest, not a pod's projected token)", "not_a_pod_token")
    if not isinstance(namespace, str) or not DNS_LABEL.fullmatch(namespace) or account is None \
            or not _matches(account.get("name"), DNS_SUBDOMAIN) or not _matches(pod.get("name"), DNS_SUBDOMAIN) \
            or not _matches(pod.get("uid"), UID):
        raise refused("its \"kubernetes.io\" claims lack a well-formed namespace, "
                       "serviceaccount.name, pod.name or pod.uid", "malformed_claims")
    found = Pod(namespace, account["name"], pod["name"], pod["uid"])
    if claims.get("sub") != f"system:serviceaccount:{found.namespace}:{found.service_account}":
        raise refused("its subject is not the service account its \"kubernetes.io\" claims name",
                       "malformed_claims")
    return found


def node_id_of(pod: Pod) -> str:
    """The pod's name as the node id, when it is one (1-64 lowercase letters, digits, '-' and
    '_'): pod names may be longer and hold '.', and a rewritten name could collide with another
    pod's, so such a pod is refused instead."""
    if not NAME_PATTERN.fullmatch(pod.name):
        raise Forbidden(f"pod {pod.name[:253]!r} of service account {pod.account} cannot be a node: "
                        "its name is not a node id (1-64 lowercase letters, digits, '-' and '_', "
                        "starting and ending with a letter or digit), and it is not rewritten into one",
                        code="pod_name_not_a_node_id",
                        hint="Name the pool's pods so that their names fit (no '.', at most 64 "
                             "characters), e.g. a StatefulSet or Deployment with a short name.")
    return pod.name


def _part(bound: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = bound.get(name)
    return value if isinstance(value, dict) else None


def _matches(value: object, pattern: re.Pattern[str]) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def refused(why: str, reason: str, hint: str = HINT) -> TokenRefused:
    return TokenRefused(f"the service-account token is refused: {why}", code=f"k8s_token_{reason}",
                        hint=hint)
