"""The evaluation state machine. Every state change goes through `transition`.

queued -> running        a worker claimed it (with a token and a lease)
running -> running       a worker took over an expired lease
running -> queued        the engine was unavailable; the claim is released for a retry
running -> passed|failed the holder of the claim recorded the outcome
queued -> failed         it cannot run at all (e.g. the engine never came back)
"""

from __future__ import annotations

from registry.errors import Conflict
from registry.tables import Evaluation

QUEUED, RUNNING, PASSED, FAILED = "queued", "running", "passed", "failed"
# Claimed in this order: re-qualification checks versions that already serve.
REQUALIFICATION, NORMAL = 0, 1
FINISHED = frozenset({PASSED, FAILED})

TRANSITIONS: dict[str, frozenset[str]] = {
    QUEUED: frozenset({RUNNING, FAILED}),
    RUNNING: frozenset({RUNNING, QUEUED, PASSED, FAILED}),
    PASSED: frozenset(),
    FAILED: frozenset(),
}


def transition(evaluation: Evaluation, to_state: str) -> None:
    if to_state not in TRANSITIONS[evaluation.state]:
        raise Conflict(f"evaluation {evaluation.id} cannot go from {evaluation.state} to {to_state}",
                       code="invalid_transition")
    evaluation.state = to_state
