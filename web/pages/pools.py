"""Pools: what each serves (aliases, canary weights and analyses), how its nodes converge, its capacity,
and what multi-LoRA costs against one replica per adapter."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from registry.active_set.placement import reading as placement
from registry.auth.principal import Role
from registry.canaries import service as canaries
from registry.nodes import service as nodes
from registry.pools import service as pools
from registry.active_set.placement.residency import residency
from registry.traffic_windows.schemas import RESIDENCY_WINDOW_S
from registry.promotions import service as promotions
from registry.request_session import RequestSession
from registry.requalification import service as requalification
from registry.sizing import service as sizing
from registry.sizing.schemas import SizingInputs
from web.charts import Bar, bar_chart
from web.rendering import PageRoute, page
from web.session import SignedInVisit, viewer

router = APIRouter(route_class=PageRoute)
POOL_NAME = Path(pattern=r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
POOLS_SHOWN = 200


@router.get("/ui/pools")
def pool_list(request: Request, visit: SignedInVisit = Depends(viewer),
              session: Session = RequestSession) -> Response:
    visit.principal.require({Role.ADMIN, Role.REVIEWER, Role.UPLOADER})
    listed, more = pools.list_page(session, limit=POOLS_SHOWN, cursor=None)
    return page(request, visit, "pools.html", pools=listed, more=more is not None)


@router.get("/ui/pools/{pool}")
def pool_page(request: Request, pool: str = POOL_NAME, visit: SignedInVisit = Depends(viewer),
              session: Session = RequestSession) -> Response:
    live = _serving_view(session, visit, pool)
    sized = sizing.size_pool(session, pool, SizingInputs(), visit.principal.tenant)
    return page(request, visit, "pool.html", sizing=sized, memory_chart=_memory_chart(sized),
                gpu_chart=_gpu_chart(sized), cost_chart=_cost_chart(sized), **live)


@router.get("/ui/pools/{pool}/live")
def pool_live(request: Request, pool: str = POOL_NAME, visit: SignedInVisit = Depends(viewer),
              session: Session = RequestSession) -> Response:
    """The serving and rollout sections alone, for the page's periodic refresh."""
    return page(request, visit, "_pool_live.html", **_serving_view(session, visit, pool))


def _serving_view(session: Session, visit: SignedInVisit, name: str) -> dict:
    rollout = nodes.rollout(session, visit.principal, name)  # checks the viewer's role
    pool = pools.get(session, name)
    aliases = promotions.list_aliases(session, visit.principal, name)
    placed = placement.placement_out(session, visit.principal, name)
    marked = requalification.listing(session, visit.principal, name)
    analyses = canaries.statuses_of(session, visit.principal, [a.promotion_id for a in aliases if a.alias == "canary"])
    by_adapter = defaultdict(list)
    for alias in aliases:
        by_adapter[f"{alias.tenant}/{alias.adapter}"].append(alias)
    return {"pool": pool, "rollout": rollout, "by_adapter": dict(by_adapter), "placement": placed,
            "residency": residency(session, visit.principal, name, RESIDENCY_WINDOW_S),
            "requalification": marked, "analyses": analyses,
            "traffic_chart": _traffic_chart(by_adapter),
            "nodes_chart": _nodes_chart(rollout, pool, visit.principal.tenant)}


def _traffic_chart(by_adapter: dict) -> object:
    """Each adapter's production and canary shares: the canary takes its weight from production."""
    bars = []
    for adapter, aliases in sorted(by_adapter.items()):
        canary = next((a for a in aliases if a.alias == "canary"), None)
        for alias in aliases:
            share = alias.weight if alias.alias == "canary" else \
                (100 - canary.weight if canary and alias.alias == "production" else 100)
            bars.append(Bar(f"{adapter}:{alias.alias} (v{alias.version})", share,
                            "base" if alias.alias == "canary" else "adapter"))
    return bar_chart("Traffic share by alias", bars, unit="%", digits=0)


def _nodes_chart(rollout, pool, tenant: str | None) -> object:
    """A tenant's viewers see only their own adapters on each node, so no capacity line for them."""
    bars = [Bar(n.node_id, len(n.serving), "over" if n.drift.missing or n.stale else "used",
                "stale" if n.stale else ("converged" if n.converged else "converging"))
            for n in rollout.nodes]
    if tenant is not None:
        return bar_chart(f"{tenant}'s adapters loaded per node", bars, digits=0)
    return bar_chart("Adapters loaded per node, against each node's resident capacity (max_cpu_loras)",
                     bars, threshold=pool.max_cpu_loras, threshold_label=f"capacity {pool.max_cpu_loras}",
                     digits=0)


def _memory_chart(sized) -> object:
    slots, waste = sized.lora_slots, sized.rank_waste
    return bar_chart("LoRA buffer memory on each replica", [
        Bar("preallocated for the max_loras slots", _mib(slots.total.value), "used", slots.total.source),
        Bar("of which unused rank headroom", _mib(waste.wasted.value), "over", waste.wasted.source)],
        unit="MiB", digits=2)


def _gpu_chart(sized) -> object:
    c = sized.comparison
    return bar_chart("GPUs needed", [
        Bar("one replica per adapter", c.full_replicas.gpus.value, "base", c.full_replicas.gpus.source),
        Bar("multi-LoRA (this pool)", c.multi_lora.gpus.value, "adapter", c.multi_lora.gpus.source)],
        digits=0)


def _cost_chart(sized) -> object:
    c = sized.comparison
    return bar_chart("Cost per 1M tokens", [
        Bar("one replica per adapter", c.full_replicas.cost_per_1m_tokens.value, "base",
            c.full_replicas.cost_per_1m_tokens.source),
        Bar("multi-LoRA (this pool)", c.multi_lora.cost_per_1m_tokens.value, "adapter",
            c.multi_lora.cost_per_1m_tokens.source)], unit="USD", digits=3)


def _mib(value) -> float | None:
    return None if value is None else value / 1024**2
