"""Where each node's vLLM is: bound by an admin when the node's token is issued, never taken
from the node's own report, since routers send tenants' prompts there.

Each binding is sealed with an HMAC under a key of the registry host's (keys.py), over the pool,
the node id and the address, and each is an audit event of the keyed chain. Someone who can write
to the database but does not hold the host's secret cannot point a node somewhere else, move one
node's address to another node or pool, or put back an earlier binding (an address since given
to someone else), unseen: a binding whose seal does not verify, or that the newest sealed
`node.bind_address` event does not name, serves no address, so that node gets no traffic until an
admin binds it again."""

from __future__ import annotations

import json
import logging

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry import audit, keys
from registry.audit import sealed
from registry.errors import Unprocessable
from registry.keys import Purpose
from registry.nodes import repository
from registry.nodes.schemas import NodeAddressUrl
from registry.tables import NodeAddress, Pool

log = logging.getLogger(__name__)
_reported_broken: set[tuple[str, str, str]] = set()  # logged once per process, not per rollout read
_ADDRESS = TypeAdapter(NodeAddressUrl)
BOUND = "node.bind_address"


def seal(pool: str, node_id: str, url: str) -> str:
    return keys.sign(Purpose.NODE_ADDRESSES, _message(pool, node_id, url))


def _message(pool: str, node_id: str, url: str) -> bytes:
    return json.dumps([pool, node_id, url]).encode()


def bind(session: Session, pool: Pool, node_id: str, url: str, *, actor: str) -> NodeAddress:
    """Bind (or move) `node_id`'s address in `pool`; audited with the address before and after,
    which is also what makes the binding current (`trusted`)."""
    url = _parse(url)
    row = repository.address_for_update(session, pool.id, node_id)
    before = {"vllm_url": row.vllm_url} if row is not None else None
    if row is None:
        try:
            with session.begin_nested():  # two tokens for one new node, issued at once
                row = NodeAddress(pool_id=pool.id, node_id=node_id, vllm_url=url,
                                  seal=seal(pool.name, node_id, url), bound_by=actor[:300])
                session.add(row)
        except IntegrityError:
            row = repository.address_for_update(session, pool.id, node_id)
            if row is None:  # the row this one collided with is gone again
                raise
    row.vllm_url, row.seal, row.bound_by = url, seal(pool.name, node_id, url), actor[:300]
    session.flush()
    audit.record(session, actor=actor, action=BOUND, subject=_subject(pool.name, node_id),
                 before=before, after={"vllm_url": url})
    return row


def _parse(url: str) -> str:
    try:
        return str(_ADDRESS.validate_python(url)).rstrip("/")
    except ValidationError as error:
        problem = error.errors()[0]["msg"]
        raise Unprocessable(f"invalid vLLM address {url[:200]!r}: {problem}",
                            code="invalid_node_address",
                            hint="Give the address routers reach the node's vLLM at, such as "
                                 "https://node-1.internal:8000.") from None


def is_bound(session: Session, pool: Pool, node_id: str) -> bool:
    return trusted_one(session, pool, node_id)[0] == "bound"


def trusted(session: Session, pool: Pool) -> dict[str, tuple[str, str | None]]:
    """node id -> (bound | seal_broken, the address routers may use) for every bound node."""
    events = sealed.newest_sealed(session, BOUND, f"pool/{pool.name}/node/")
    return {row.node_id: _state(pool.name, row, events.get(_subject(pool.name, row.node_id)))
            for row in repository.addresses_of_pool(session, pool.id)}


def trusted_one(session: Session, pool: Pool, node_id: str) -> tuple[str, str | None]:
    row = repository.address_of(session, pool.id, node_id)
    if row is None:
        return "unbound", None
    subject = _subject(pool.name, node_id)
    return _state(pool.name, row, sealed.newest_sealed(session, BOUND, subject).get(subject))


def _state(pool: str, row: NodeAddress, newest_binding) -> tuple[str, str | None]:
    """The row counts while its seal holds and it is the binding the newest sealed `node.bind_address`
    event names: an older sealed row put back (an address since reassigned) does not."""
    fresh = newest_binding is not None and sealed.recorded(newest_binding, "vllm_url") == row.vllm_url
    if fresh and keys.verifies_current(Purpose.NODE_ADDRESSES, _message(pool, row.node_id, row.vllm_url),
                                       row.seal):
        return "bound", row.vllm_url
    key = (pool, row.node_id, row.vllm_url)
    if key not in _reported_broken and len(_reported_broken) < 10_000:
        _reported_broken.add(key)
        log.error("the address bound to node %s of pool %s is not the one its seal and its newest "
                  "sealed binding name: it was changed outside the registry; the node gets no "
                  "traffic until an admin binds it again", row.node_id, pool)
    return "seal_broken", None


def reseal(session: Session, *, actor: str) -> int:
    """After LORAPLANE_SECRET_KEY is rotated: every binding sealed under the previous secret,
    sealed again under the new one, with a binding event keyed with it. Those that do not hold
    are left for an admin to bind again. Returns how many."""
    resealed = 0
    for pool, row in repository.all_addresses(session):
        secret = keys.matching(Purpose.NODE_ADDRESSES, _message(pool.name, row.node_id, row.vllm_url), row.seal)
        if secret is None or secret == keys.current_fingerprint():
            continue
        subject = _subject(pool.name, row.node_id)
        newest = sealed.newest_sealed(session, BOUND, subject).get(subject)
        if newest is None or sealed.recorded(newest, "vllm_url") != row.vllm_url:
            continue  # not the binding in force: nothing to carry over
        row.seal = seal(pool.name, row.node_id, row.vllm_url)
        audit.record(session, actor=actor, action=BOUND, subject=_subject(pool.name, row.node_id),
                     before={"vllm_url": row.vllm_url}, after={"vllm_url": row.vllm_url, "resealed": True})
        resealed += 1
    session.flush()
    return resealed


def _subject(pool: str, node_id: str) -> str:
    return f"pool/{pool}/node/{node_id}"
