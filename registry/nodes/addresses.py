"""Where each node's vLLM is: bound by an admin when the node's token is issued, never taken
from the node's own report, since routers send tenants' prompts there.

Each binding is sealed with an HMAC under a key of the registry host's (keys.py), over the pool,
the node id and the address. Someone who can write to the database but does not hold the host's
secret cannot point a node somewhere else, nor move one node's address to another node or pool,
unseen: a binding whose seal does not verify serves no address, so that node gets no traffic
until an admin binds it again."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.errors import Unprocessable
from registry.keys import Purpose, key_for
from registry.nodes import repository
from registry.nodes.schemas import NodeAddressUrl
from registry.tables import NodeAddress, Pool

log = logging.getLogger(__name__)
_reported_broken: set[tuple[str, str, str]] = set()  # logged once per process, not per rollout read
_ADDRESS = TypeAdapter(NodeAddressUrl)


def seal(pool: str, node_id: str, url: str) -> str:
    message = json.dumps([pool, node_id, url]).encode()
    return hmac.new(key_for(Purpose.NODE_ADDRESSES), message, hashlib.sha256).hexdigest()


def bind(session: Session, pool: Pool, node_id: str, url: str, *, actor: str) -> NodeAddress:
    """Bind (or move) `node_id`'s address in `pool`; audited with the address before and after."""
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
    if before is not None and before["vllm_url"] == url and verified(pool.name, row) == url:
        return row
    row.vllm_url, row.seal, row.bound_by = url, seal(pool.name, node_id, url), actor[:300]
    session.flush()
    audit.record(session, actor=actor, action="node.bind_address",
                 subject=f"pool/{pool.name}/node/{node_id}", before=before, after={"vllm_url": url})
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
    row = repository.address_for_update(session, pool.id, node_id)
    return row is not None and verified(pool.name, row) is not None


def verified(pool: str, row: NodeAddress) -> str | None:
    """The bound address if its seal holds; None, logged once, if the row was changed outside
    the registry."""
    if hmac.compare_digest(row.seal, seal(pool, row.node_id, row.vllm_url)):
        return row.vllm_url
    key = (pool, row.node_id, row.vllm_url)
    if key not in _reported_broken:
        _reported_broken.add(key)
        log.error("the address bound to node %s of pool %s does not match its seal: it was changed "
                  "outside the registry; the node gets no traffic until an admin binds it again",
                  row.node_id, pool)
    return None


def of_pool(session: Session, pool: Pool) -> dict[str, NodeAddress]:
    """node id -> its binding row (check it with `verified` before use)."""
    return {row.node_id: row for row in repository.addresses_of_pool(session, pool.id)}
