"""Work that must happen once across every registry and housekeeper process on one database:
a leader for the housekeeper's loops, one turn at a time for the registry's start-up work, and
one sender at a time for a webhook delivery. docs/operations.md, "Several replicas", says which
work uses which, and why."""
