"""One task's work: claim a batch, evaluate it on the engine, record one outcome per evaluation.

Outcomes, never crashes: an adapter the engine refuses, or a suite whose dataset cannot be read,
fails with the reason in plain words; a fault that may pass (the engine, the store or the database
is away) gives the claim back and asks for a retry with backoff, and fails the evaluation only
when its attempts are spent. Anything else fails at once: another attempt would meet it again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from registry.unit_of_work import transaction
from registry.errors import NotFound, Unprocessable
from registry.eval_suites import service as suites
from registry.evaluation_policies.schemas import QUALITY_METRICS
from registry.evaluations import claims
from registry.requalification import service as requalification
from registry.rows import existing
from registry.storage import get_store
from registry.tables import EvalSuite
from workers import metrics
from workers.evaluation import artifacts, faults, parity, scoring, serving_cost
from workers.evaluation.engine import AdapterRejected, EngineClient, EngineInfo
from workers.evaluation import runner
from workers.evaluation.runner import BatchRun, SuiteWork
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)
RETRYING = "retrying: "  # how a released claim's reason starts
# One thread, kept for the parity reference alone, so the lease keeper and the event loop run
# beside it; at a lower priority (see below).
_PARITY_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parity",
                                    initializer=lambda: _yield_cpu_to_the_engine())


@dataclass(frozen=True)
class TaskResult:
    retry_after_s: float | None = None
    recorded: tuple[int, ...] = ()
    note: str = ""


def evaluate(evaluation_id: int, settings: WorkerSettings) -> TaskResult:
    with transaction() as session:
        claim = claims.claim_batch(session, evaluation_id, max_versions=settings.engine_max_loras,
                                   lease_s=settings.lease_s)
    if claim.kind == "finished":
        return TaskResult(note="already finished")
    if claim.kind == "held":
        return TaskResult(retry_after_s=claim.retry_after_s, note="held by a live worker")
    token = claim.token
    if token is None:  # a claim comes with its token
        raise RuntimeError(f"the claim of evaluation {evaluation_id} holds no token")
    # A claim also returns to the queue when its worker died mid-batch: that is bounded as well.
    spent = {e.id: _gave_up(e.last_reason or "its worker stopped during every attempt", e.attempts - 1)
             for e in claim.evaluations if e.attempts > settings.max_attempts}
    finished = _record(token, _as_outcomes(spent, settings))
    working = [e for e in claim.evaluations if e.id not in spent]
    if not working:
        return finished
    ids = [e.id for e in working]
    lead = evaluation_id if evaluation_id in ids else ids[0]
    log.info("claimed evaluations %s", ids)
    started = time.perf_counter()
    metrics.BATCH_VERSIONS.observe(len(ids))
    with _LeaseKeeper(token, ids, settings):
        try:
            outcomes = asyncio.run(_evaluate_claimed(working, settings))
        except Exception as error:
            if faults.is_transient(error):
                metrics.RETRIES.labels(type(error).__name__).inc()
                return _retry_later(lead, token, ids, faults.transient_reason(error), settings)
            log.exception("evaluations %s failed", ids)
            outcomes = _as_outcomes({i: faults.reason_for(error) for i in ids}, settings)
    done = _record(token, outcomes)
    metrics.BATCH_SECONDS.observe(time.perf_counter() - started)
    return TaskResult(recorded=finished.recorded + done.recorded)


def _record(token: str, outcomes: dict[int, claims.Outcome], note: str = "") -> TaskResult:
    recorded = []
    for evaluation_id, outcome in outcomes.items():
        with transaction() as session:
            if claims.record(session, token, evaluation_id, outcome,
                             after_outcome=requalification.after_evaluation):
                recorded.append(evaluation_id)
        if recorded and recorded[-1] == evaluation_id:  # committed
            _count(outcome)
    return TaskResult(recorded=tuple(recorded), note=note)


def _count(outcome: claims.Outcome) -> None:
    judged = outcome.timings is not None  # an outcome that never reached the judging has none
    kind = "passed" if outcome.passed else "failed_metrics" if judged else "failed_unjudged"
    metrics.EVALUATIONS.labels(kind).inc()
    for metric in outcome.failing_metrics:
        metrics.FAILING_METRICS.labels(metric).inc()


def _gave_up(reason: str, attempts: int) -> str:
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return f"{reason.removeprefix(RETRYING)}; gave up after {tries}. Check the engine, then " \
           f"request the evaluation again."


def _as_outcomes(reasons: dict[int, str], settings: WorkerSettings) -> dict[int, claims.Outcome]:
    return {evaluation_id: _failed(reason, None, settings) for evaluation_id, reason in reasons.items()}


def _retry_later(evaluation_id: int, token: str, ids: list[int], reason: str,
                 settings: WorkerSettings) -> TaskResult:
    """A fault that may pass: give the claim back, or fail the evaluation once its attempts are
    spent. Batch-mates keep their own budget."""
    with transaction() as session:
        attempts = claims.attempts_of(session, evaluation_id)
    if attempts >= settings.max_attempts:
        message = _gave_up(reason, attempts)
        with transaction() as session:
            claims.release(session, token, [i for i in ids if i != evaluation_id],
                           reason=RETRYING + reason)
        return _record(token, _as_outcomes({evaluation_id: message}, settings), note=message)
    with transaction() as session:
        claims.release(session, token, ids, reason=RETRYING + reason)
    delay = settings.backoff_s(attempts)
    log.warning("%s; retrying evaluation %s in %.0f s", reason, evaluation_id, delay)
    return TaskResult(retry_after_s=delay, note=reason)


async def _evaluate_claimed(claimed: list[claims.ClaimedEvaluation],
                            settings: WorkerSettings) -> dict[int, claims.Outcome]:
    client = EngineClient(settings.engine_url, timeout_s=settings.engine_request_timeout_s,
                          max_in_flight=settings.engine_max_in_flight)
    try:
        # The datasets first: one that cannot be read fails its evaluations before any engine work.
        works, specs, unreadable = _load_suites({e.suite_id for e in claimed})
        outcomes = {e.id: _failed(unreadable[e.suite_id], None, settings)
                    for e in claimed if e.suite_id in unreadable}
        claimed = [e for e in claimed if e.suite_id not in unreadable]
        if not claimed:
            return outcomes
        prepare_started = time.perf_counter()  # the engine described, each adapter fetched and loaded
        info = await client.describe()
        halves = {e.id for e in claimed if e.incumbent_half}
        store, loaded, references, digests = get_store(), {}, {}, {}
        for evaluation in claimed:
            try:
                folder = artifacts.fetch(store, settings.artifact_cache, evaluation.digest,
                                         evaluation.files)
                reference = folder
                if evaluation.reference_digest != evaluation.digest:
                    reference = artifacts.fetch(store, settings.artifact_cache, evaluation.reference_digest,
                                                evaluation.reference_files)
                await client.load_adapter(evaluation.served_name, str(folder))
            except (AdapterRejected, artifacts.ArtifactCorrupt) as rejected:
                outcomes[evaluation.id] = _failed(str(rejected), info, settings)
                continue
            except NotFound as missing:  # its artifact left the store: that one version fails
                outcomes[evaluation.id] = _failed(faults.reason_for(missing), info, settings)
                continue
            loaded[evaluation.id] = (evaluation.served_name, evaluation.suite_id)
            digests[evaluation.id] = evaluation.digest
            references[evaluation.id] = reference  # what parity compares the engine's tokens with
        prepare_s, batch = time.perf_counter() - prepare_started, None
        try:
            batch = await runner.generate(client, info.served_base, works, loaded,
                                          settings.engine_max_in_flight)
            batch.timings["prepare_s"] = prepare_s
            # Before the parity reference starts: the bursts' timings must not share the CPU.
            serving = await _measure_serving(client, info.served_base, batch, works, specs, loaded, halves,
                                             settings)
            # Prompt log-probabilities go to the engine one at a time (runner's note): only for
            # the suites that measure reference_loglik.
            scored = {suite_id for suite_id, spec in specs.items() if "reference_loglik" in spec}
            await runner.score(client, info.served_base, {s: works[s] for s in scored},
                               {e: v for e, v in loaded.items() if v[1] in scored}, batch)
            # Then the parity reference, on every core: beside the scoring, it slowed each of the
            # scoring's one-at-a-time requests more than it saved (bench/results/eval.json).
            checks = await asyncio.get_running_loop().run_in_executor(
                _PARITY_THREAD, _parity_all, batch, works, specs, loaded, halves, references, info, settings)
        finally:
            unloading = time.perf_counter()
            for served_name, _ in loaded.values():
                await client.unload_adapter(served_name)
            if batch is not None:
                batch.timings["unload_s"] = time.perf_counter() - unloading
                for phase, seconds in batch.timings.items():
                    if "." not in phase:  # the batch's own phases, not one version's share
                        metrics.PHASE_SECONDS.labels(phase.removesuffix("_s")).observe(seconds)
    finally:
        await client.aclose()
    for evaluation_id, (_, suite_id) in loaded.items():
        spec = specs[suite_id]
        if evaluation_id in halves:
            # what a comparison reads
            spec = {metric: limit for metric, limit in spec.items() if metric in QUALITY_METRICS}
        outcome = _judge(batch, evaluation_id, works[suite_id], spec, checks.get(evaluation_id),
                         serving.get(evaluation_id), info, settings)
        # The bytes it loaded: fetch() verified every file and that the manifest makes the digest.
        outcomes[evaluation_id] = replace(outcome, digest=digests[evaluation_id])
    return outcomes


async def _measure_serving(client: EngineClient, served_base: str, batch: BatchRun,
                           works: dict[int, SuiteWork], specs: dict[int, dict],
                           loaded: dict[int, tuple[str, int]], halves: set[int],
                           settings: WorkerSettings) -> dict[int, serving_cost.ServingCost]:
    """The like-for-like serving cost of each adapter whose suite measures it: the adapters of one
    suite together, sharing the base's bursts (serving_cost.py)."""
    costs: dict[int, serving_cost.ServingCost] = {}
    started = time.perf_counter()
    for suite_id, limits in ((s, specs[s].get("serving")) for s in works):
        adapters = {e: name for e, (name, s) in loaded.items()
                    if s == suite_id and e not in halves and not batch.adapters[e].rejected}
        if limits is None or not adapters:
            continue
        measured, refused = await serving_cost.measure(
            client, served_base, adapters, works[suite_id], max_in_flight=settings.engine_max_in_flight,
            rounds=limits.get("rounds", 1), prompts=limits.get("prompts", 16))
        costs.update(measured)
        for evaluation_id, reason in refused.items():
            batch.adapters[evaluation_id].rejected = reason
    batch.timings["serving_s"] = time.perf_counter() - started
    return costs


def _load_suites(suite_ids: set[int]) -> tuple[dict[int, SuiteWork], dict[int, dict], dict[int, str]]:
    """(work, metrics spec) per readable suite, and the reason for each one that is not."""
    works, specs, unreadable = {}, {}, {}
    with transaction() as session:
        for suite_id in suite_ids:
            suite = existing(session, EvalSuite, suite_id)
            try:
                examples = suites.load_examples(get_store(), suite)
            except Unprocessable as error:  # the stored dataset itself is wrong: no retry mends it
                unreadable[suite_id] = faults.reason_for(error)
                continue
            works[suite_id] = SuiteWork(
                suite_id=suite_id, prompts=[e.prompt for e in examples],
                references=[e.reference for e in examples], max_tokens=suite.generation["max_tokens"],
                stop=suite.generation["stop"], ignore_eos=suite.generation["ignore_eos"])
            specs[suite_id] = suite.metrics
    return works, specs, unreadable


def _parity_all(batch: BatchRun, works: dict[int, SuiteWork], specs: dict[int, dict],
                loaded: dict[int, tuple[str, int]], halves: set[int], references: dict[int, Path],
                info: EngineInfo, settings: WorkerSettings) -> dict[int, list[parity.ParityExample]]:
    checks, all_started = {}, time.perf_counter()
    for evaluation_id, (_, suite_id) in loaded.items():
        side, work = batch.adapters[evaluation_id], works[suite_id]
        if "parity" not in specs[suite_id] or evaluation_id in halves or side.rejected:
            continue
        started = time.perf_counter()
        reference = parity.kept_reference(
            settings.engine_model_dir or Path(info.model_dir), dtype=settings.engine_dtype,
            device=None if settings.parity_device == "auto" else settings.parity_device,
            threads=settings.parity_threads, keep=settings.parity_keep_base)
        checks[evaluation_id] = reference.compare(references[evaluation_id], [
            (t.prompt_ids, g.token_ids, g.logprobs) for t, g in zip(work.tokenized, side.generations, strict=False)])
        batch.timings[f"parity_s.{evaluation_id}"] = time.perf_counter() - started
    batch.timings["parity_s"] = time.perf_counter() - all_started  # beside the scoring, in its thread
    return checks


def _yield_cpu_to_the_engine() -> None:
    """Lower this thread's priority (Linux schedules threads one by one): the reference fills the
    cores the engine leaves idle instead of slowing the scoring requests it runs beside."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


def _judge(batch: BatchRun, evaluation_id: int, work: SuiteWork, spec: dict,
           checks: list[parity.ParityExample] | None, serving: serving_cost.ServingCost | None,
           info: EngineInfo, settings: WorkerSettings) -> claims.Outcome:
    side, base = batch.adapters[evaluation_id], batch.base[work.suite_id]
    rejected = side.rejected or base.rejected
    if rejected:
        return _failed(rejected, info, settings)
    timings = {k: v for k, v in batch.timings.items() if "." not in k}  # the batch's own phases
    if f"parity_s.{evaluation_id}" in batch.timings:  # and this evaluation's
        timings["own_parity_s"] = batch.timings[f"parity_s.{evaluation_id}"]
    metrics, failing = scoring.judge(spec, work, side, base, checks, serving, dtype=settings.engine_dtype)
    exact, contained = scoring.exact_matches(side, work), scoring.contains(side, work)
    examples = [{
        "prompt": prompt, "reference": reference, "output": g.text, "base_output": b.text,
        "exact_match": exact[i], "contains": contained[i],
        "reference_loglik": _at(side.reference_logliks, i),
        "base_reference_loglik": _at(base.reference_logliks, i),
        "parity_max_logprob_diff": checks[i].max_logprob_diff if checks else None,
        "parity_tokens_match": checks[i].tokens_match if checks else None,
    } for i, (prompt, reference, g, b) in enumerate(
        zip(work.prompts, work.references, side.generations, base.generations, strict=False))]
    reason = f"failed: {', '.join(failing)}" if failing else None
    return claims.Outcome(passed=not failing, reason=reason, failing_metrics=failing, metrics=metrics,
                          engine=_engine_record(info, settings), timings=timings, examples=examples)


def _at(values: list, index: int):
    return values[index] if index < len(values) else None


def _failed(reason: str, info: EngineInfo | None, settings: WorkerSettings) -> claims.Outcome:
    """info is None when the failure came before the engine was asked anything."""
    engine = _engine_record(info, settings) if info is not None else {"url": settings.engine_url}
    return claims.Outcome(passed=False, reason=reason, failing_metrics=[], metrics={},
                          engine=engine, timings=None, examples=[])


def _engine_record(info: EngineInfo, settings: WorkerSettings) -> dict:
    return {"url": info.url, "vllm_version": info.vllm_version, "served_base": info.served_base,
            "dtype": settings.engine_dtype,
            "flags": {"enable_lora": True, "max_loras": info.observed_max_loras or settings.engine_max_loras,
                      "max_lora_rank": settings.engine_max_lora_rank, "dtype": settings.engine_dtype}}


class _LeaseKeeper:
    """Renews the claim's lease in the background while the batch runs."""

    def __init__(self, token: str, ids: list[int], settings: WorkerSettings) -> None:
        self.token, self.ids, self.lease_s = token, ids, settings.lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                with transaction() as session:
                    if claims.renew(session, self.token, self.ids, lease_s=self.lease_s) == 0:
                        log.warning("lost the claim on %s; its results will be discarded", self.ids)
                        return
            except Exception:  # the database may blip; the next tick tries again
                log.exception("could not renew the lease on %s", self.ids)
