"""What the first registry to start with a new LORAPLANE_SECRET_KEY does, once per secret it
replaced: seal again, under the new secret, the rows that are checked under the current secret
alone (node address bindings, canary analyses, traffic windows, the attestation key ledger), then
record the old secret's checkpoint (registry/secret_checkpoints/), after which it verifies nothing
new. Audited as `deployment.secret.rotated` with what was sealed again."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from registry import audit, keys
from registry.attestation_keys import ledger
from registry.nodes import addresses
from registry.promotions import analysis_seals
from registry.secret_checkpoints import service as secret_checkpoints
from registry.settings import get_settings
from registry.traffic_windows import service as traffic_windows

log = logging.getLogger(__name__)


def carry_over(session: Session, *, actor: str) -> list[str]:
    """Checkpoint every previous secret that has none yet; the fingerprints checkpointed now."""
    previous = [keys.fingerprint(secret) for secret in get_settings().previous_secrets()]
    if not previous:
        return []
    secret_checkpoints.lock(session)
    known = secret_checkpoints.checkpoints(session, fresh=True)
    done = []
    for secret in previous:
        if secret in known or secret == keys.current_fingerprint():
            continue
        resealed = {"node_addresses": addresses.reseal(session, actor=actor),
                    "canary_analyses": analysis_seals.reseal(session),
                    "traffic_windows": traffic_windows.reseal(session),
                    "attestation_key_ledger": ledger.reseal(session)}
        checkpoint = secret_checkpoints.record(session, secret)
        audit.record(session, actor=actor, action="deployment.secret.rotated", subject="deployment/secret",
                     after={"previous": secret, "current": keys.current_fingerprint(),
                            "through_event": checkpoint.through_event,
                            "through_token": checkpoint.through_token, "resealed": resealed})
        log.warning("LORAPLANE_SECRET_KEY was rotated: the previous secret %s… verifies nothing after "
                    "audit event %d and token %d; sealed again under the new one: %s", secret[:8],
                    checkpoint.through_event, checkpoint.through_token, resealed)
        done.append(secret)
    return done
