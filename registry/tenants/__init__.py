"""Tenants as records of their own: created, renamed (the display name; the slug never changes),
disabled and enabled, and given quotas of their own. auth reads a tenant's state at every token
use; tokens, evaluations and eval suites use this package, never the other way round."""
