"""Who could act as whom. An identity that issued a token of another identity holds that
token's secret for a moment, so it could have acted as that identity; so could whoever issued
the issuer's tokens. Four-eyes refuses any pair where one side is in the other's lineage, or
where both sides share an issuer below the global admins (the root of trust, who can act as
anyone in any case). Identities linked as one person (old tokens and a sign-on, say) are one side
together: each holds what the others hold."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.auth import repository
from registry.tables import Identity

MAX_DEPTH = 64  # lineages are a few links long; the bound only guards against a cycle


def person(session: Session, identity_id: int) -> set[int]:
    """Every identity of the person behind `identity_id`."""
    return repository.linked_identities(session, identity_id)


def issuers(session: Session, identity_ids: set[int]) -> set[int]:
    """Every identity that issued a token of one of `identity_ids` (one person's), directly or
    through others."""
    found: set[int] = set()
    frontier = set(identity_ids)
    for _ in range(MAX_DEPTH):
        step = repository.issuers_of(session, frontier) - found - identity_ids
        if not step:
            break
        found |= step
        frontier = step
    return found


def global_admins(session: Session, identity_ids: set[int]) -> set[int]:
    """Those of `identity_ids` that hold a global admin token: the root of trust."""
    if not identity_ids:
        return set()
    return repository.global_admin_identities(session, identity_ids)


def describe(session: Session, identity_id: int) -> str:
    identity = session.get(Identity, identity_id)
    return f"{identity.name} (identity {identity_id})" if identity else f"identity {identity_id}"


SECOND_PERSON = ("Ask another reviewer, with a token of their own that was not issued by or to the "
                 "other party.")
SHARED_ISSUER = ("Ask a reviewer whose token was issued by someone else (another tenant admin, or a "
                 "global admin).")


def could_act_as(session: Session, approver_id: int, party_id: int, deed: str) -> tuple[str, str] | None:
    """(why, what to do) when the approver could have done what `party_id` did (`deed`, e.g.
    "uploaded this version"), and so may not approve it; None when they are two people."""
    me = describe(session, approver_id)
    if party_id == approver_id:
        return f"{me} {deed} and may not approve it", SECOND_PERSON
    them = describe(session, party_id)
    mine, theirs = person(session, approver_id), person(session, party_id)
    if mine & theirs:
        return (f"{me} is linked as one person with {them}, who {deed}, and may not approve it",
                SECOND_PERSON)
    my_issuers = issuers(session, mine)
    if theirs & my_issuers:
        return f"{me} holds a token issued through {them}, who {deed}, and may not approve it", SECOND_PERSON
    their_issuers = issuers(session, theirs)
    if mine & their_issuers:
        return f"{me} issued a token of {them}, who {deed}, and may not approve it", SECOND_PERSON
    shared = (my_issuers & their_issuers) - global_admins(session, my_issuers & their_issuers)
    if shared:
        common = describe(session, min(shared))
        return (f"{me} and {them}, who {deed}, hold tokens issued through the same {common}, who "
                f"could act as both; {me} may not approve it"), SHARED_ISSUER
    return None
