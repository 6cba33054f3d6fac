"""A pool by its name, and the names of the aliases every pool serves: the one home of both, for
the packages that change pools (pools, active_set, promotions, canaries, tokens ...)."""

from registry.pool_lookup.lookup import CANARY, PRODUCTION, pool_by_name

__all__ = ["CANARY", "PRODUCTION", "pool_by_name"]
