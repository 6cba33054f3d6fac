"""Prometheus metrics of the evaluation worker and the housekeeper. Each runs as one process
(the worker's pool is solo, the housekeeper's threads), so the default registry holds them all;
`workers/metrics_endpoint.py` serves them to a metrics token."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PHASE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

EVALUATIONS = Counter(
    "loraplane_worker_evaluations_total", "Evaluations this worker recorded, by outcome: passed, "
    "failed_metrics (judged, a metric missed its threshold) or failed_unjudged (refused by the "
    "engine, its suite unreadable, an error, or out of attempts)", ["outcome"])
FAILING_METRICS = Counter(
    "loraplane_worker_failing_metrics_total", "Metrics that failed evaluations missed, one count "
    "per evaluation and metric", ["metric"])
RETRIES = Counter(
    "loraplane_worker_retries_total", "Batches put back for a transient fault (the engine, the "
    "store or the database away), by the fault's type", ["fault"])
BATCH_SECONDS = Histogram(
    "loraplane_worker_batch_seconds", "Wall time of one claimed batch, from its claim to its "
    "last recorded outcome", buckets=PHASE_BUCKETS)
BATCH_VERSIONS = Histogram(
    "loraplane_worker_batch_versions", "Versions evaluated together in one batch",
    buckets=(1, 2, 4, 8, 16, 32, 64))
PHASE_SECONDS = Histogram(
    "loraplane_worker_phase_seconds", "Time a batch spent in each phase (prepare, tokenize, "
    "base_generation, adapter_generation, serving, scoring, parity, unload)", ["phase"],
    buckets=PHASE_BUCKETS)

CANARY_ROUNDS = Counter(
    "loraplane_housekeeper_canary_rounds_total", "Rounds of canary analysis, by outcome (ok, or "
    "failed: the database was away)", ["outcome"])
CANARY_VERDICTS = Counter(
    "loraplane_housekeeper_canary_verdicts_total", "Canaries the analysis acted on, by what it "
    "did: step, promoted, rolled_back", ["verdict"])
LEADER = Gauge(
    "loraplane_housekeeper_leader", "1 while this housekeeper leads, and so runs canary analysis, "
    "the webhook sweep and blob collection; 0 while another does")
LAST_ROUND = Gauge(
    "loraplane_housekeeper_last_round_timestamp_seconds", "When each housekeeping loop last "
    "finished a round (unix time): canary-analysis, webhook-sweep, blob-collection", ["loop"])
BLOBS_COLLECTED = Counter(
    "loraplane_housekeeper_blobs_collected_total", "Blobs the collector removed from the store")
BLOB_ROUND_FAILURES = Counter(
    "loraplane_housekeeper_blob_collection_failures_total", "Rounds of blob collection that "
    "failed (the database or the store away)")
WEBHOOK_ATTEMPTS = Counter(
    "loraplane_housekeeper_webhook_attempts_total", "Webhook delivery attempts, by outcome: "
    "delivered, retrying or failed (gave up)", ["outcome"])
GATEWAY_ROUNDS = Counter(
    "loraplane_housekeeper_gateway_rounds_total", "Rounds of the inference gateway's reconciler, "
    "by outcome (ok, or failed: the database or the Kubernetes API was away)", ["outcome"])
GATEWAY_WRITES = Counter(
    "loraplane_housekeeper_gateway_writes_total", "Gateway objects the reconciler wrote, by action: "
    "created, updated, corrected (drift on loraplane's fields taken back) or deleted", ["action"])
GATEWAY_CONFLICTS = Gauge(
    "loraplane_housekeeper_gateway_conflicts", "Gateway objects the last round left alone: another "
    "field manager applied fields loraplane declares, an object of loraplane's name is not its own, "
    "or the API server refused the object")
