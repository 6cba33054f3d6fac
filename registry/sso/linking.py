"""Two identities of one person, linked: a person who held tokens before signing on, say. The
caller proves they are both by holding a token of each. From then on four-eyes treats them as one
person (registry/auth/lineage.py): what one uploaded, the other cannot approve. Links only ever
join; every identity of a person points at one root."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.auth import tokens
from registry.auth.lineage import person
from registry.auth.principal import Principal, Role
from registry.errors import Forbidden
from registry.sso import repository
from registry.tables import Identity

PEOPLE = (Role.ADMIN, Role.REVIEWER, Role.UPLOADER)


def link(session: Session, principal: Principal, other_token: str) -> list[int]:
    """Link the caller's identity with the identity of `other_token`; the person's identities."""
    principal.require(set(PEOPLE))
    other = tokens.authenticate(session, other_token.strip() or None, unlinked_ok=True)
    if other.role not in PEOPLE:
        raise Forbidden(f"the token to link is a {other.role} token, not a person's",
                        code="not_a_person_token", hint="Link a reviewer, uploader or admin token of yours.")
    repository.lock_identities(session, {principal.identity_id, other.identity_id})  # two links at once
    mine, theirs = person(session, principal.identity_id), person(session, other.identity_id)
    if mine & theirs:
        return sorted(mine)
    my_root, their_root = _root(session, principal.identity_id), _root(session, other.identity_id)
    repository.lock_identities(session, {my_root, their_root})
    repository.repoint_links(session, their_root, my_root)
    session.flush()
    audit.record(session, actor=principal.label, action="identity.linked", subject=f"identity/{my_root}",
                 after={"identities": sorted(mine | theirs), "proved_by_token": other.token_id})
    return sorted(mine | theirs)


def _root(session: Session, identity_id: int) -> int:
    identity = session.get(Identity, identity_id)
    return identity.same_as_id if identity is not None and identity.same_as_id else identity_id
