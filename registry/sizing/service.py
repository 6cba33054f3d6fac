"""Read what a pool's sizing needs: its limits, its base's module table and its active set."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.pool_lookup import pool_by_name
from registry.base_models import stored_tables
from registry.rows import existing
from registry.sizing import calculator, repository
from registry.sizing.schemas import SizingInputs, SizingOut
from registry.tables import BaseModel


def size_pool(session: Session, pool_name: str, inputs: SizingInputs, tenant: str | None) -> SizingOut:
    """With `tenant`, the active-set figures count that tenant's versions only: a pool serves
    every tenant, and one tenant may not learn the others' counts, ranks or sizes."""
    pool = pool_by_name(session, pool_name)
    base = existing(session, BaseModel, pool.base_model_id)
    active = repository.active_ranks_and_sizes(session, pool.id, tenant)
    table = stored_tables.table_of(session, base)
    facts = calculator.PoolFacts(
        pool=pool.name, base_model=base.name, table=table, tied_embeddings=table.tied_embeddings,
        max_loras=pool.max_loras, max_cpu_loras=pool.max_cpu_loras,
        max_lora_rank=pool.max_lora_rank, dtype=pool.dtype,
        active_ranks=tuple(row.rank for row in active),
        active_bytes=sum(row.size_bytes for row in active))
    sized = calculator.size(facts, inputs)
    sized.scope = f"tenant {tenant}" if tenant else "pool"
    return sized
