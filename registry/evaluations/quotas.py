"""What one tenant may ask of the shared evaluation workers: a bound on its evaluations waiting
or running at once, its own or the deployment's (registry/tenants/quotas.py; the suites it owns
are bounded in eval_suites). Re-qualification's
evaluations are the platform's own and never counted, nor refused. A request past the bound is
refused before anything is stored or sent, with what to do about it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.errors import TooManyRequests
from registry.evaluations import repository
from registry.tenants import quotas as tenant_quotas

RETRY_AFTER_S = 60


def check_waiting(session: Session, tenant_id: int, tenant: str, adding: int = 1) -> None:
    """Refuse when `adding` more would pass the quota (0: when those just added did). Takes the
    tenant's row lock first, so that requests racing through several registries are counted one
    after another, each seeing what the others committed."""
    quota = tenant_quotas.waiting_evaluations(repository.lock_tenant(session, tenant_id))
    waiting = repository.waiting_of_tenant(session, tenant_id)
    if waiting + adding > quota.limit:
        raise TooManyRequests(
            f"tenant {tenant!r} has {waiting} evaluations waiting or running, and may have at most "
            f"{quota.limit} ({quota.source})"
            + (f"; {adding} more would pass it" if adding else ", past it with this request's"),
            hint="Try again once some have finished (GET /v1/evaluations?state=queued), or "
                 f"{quota.more}.", headers={"Retry-After": str(RETRY_AFTER_S)})

