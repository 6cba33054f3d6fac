"""What one leaked credential of each kind, or write access to the database without the
registry host's keys, attempts against a running deployment, and whether it got its way.

Each attack acts as the attacker would (with their token through the API and the router, or
with SQL on the database) and then looks at what the attacker wanted: a prompt at their server,
a canary moved, bytes signed, a record changed. `succeeded` is that outcome, never the status
code alone. The catalogue is run by bench/trust.py (counts, `bench/results/trust.json`) and by
tests/test_trust_attacks.py (one test per attack)."""
