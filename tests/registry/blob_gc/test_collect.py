"""The blob collector against real Postgres and S3: it collects only blobs nothing names that have
stayed unnamed (and unwritten) for the grace period, is idempotent, audits what it removes, and
never races an upload of the same bytes into a dangling reference.

A bucket of this module's own holds copies of what the tests choose, so the collector never
touches the blobs other tests' versions name in the session's bucket."""

from __future__ import annotations

import hashlib
import secrets
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from devkit import services
from devkit.units_of_work import unit_of_work
from registry.adapters.artifact import blob_key
from registry.blob_gc import repository, service
from registry.settings import RegistrySettings
from registry.storage.s3 import S3Store
from registry.tables import AuditEvent, BaseModel, BlobGcMark, EvalSuite
from registry.unit_of_work import UnitOfWork
from tests.conftest import BUCKET

GC_BUCKET = "blob-gc-tests"
GRACE = timedelta(days=7)


@pytest.fixture(scope="module")
def store(s3, s3_client):
    s3_client.create_bucket(Bucket=GC_BUCKET)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in services.S3_CREDENTIALS.items():
            patch.setenv(name, value)
        yield S3Store(RegistrySettings(storage="s3", s3_endpoint_url=s3.url, s3_bucket=GC_BUCKET))


@pytest.fixture
def begin_work(engine):
    return lambda: UnitOfWork(Session(engine, expire_on_commit=False))


def keys(s3_client) -> set[str]:
    listing = s3_client.list_objects_v2(Bucket=GC_BUCKET)
    return {o["Key"].rsplit("/", 1)[-1] for o in listing.get("Contents", [])}


def orphan(store) -> str:
    data = secrets.token_bytes(64)
    sha256 = hashlib.sha256(data).hexdigest()
    store.put_bytes(blob_key(sha256), data)
    return sha256


def copy_in(s3_client, sha256: str) -> None:
    """The session bucket's blob, copied into this module's bucket under the same key."""
    s3_client.copy_object(Bucket=GC_BUCKET, Key=blob_key(sha256),
                          CopySource={"Bucket": BUCKET, "Key": blob_key(sha256)})


def collected_events(engine) -> list[AuditEvent]:
    with Session(engine) as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == "blob.collected")
                                    .order_by(AuditEvent.id)))


def test_only_unnamed_blobs_past_the_grace_period_are_collected_once(
        store, begin_work, engine, s3_client, make_ready, client_for, promo_pools):
    uploader = client_for("acme_uploader")
    kept_v, gone_v = make_ready("gc-kept"), make_ready("gc-gone")
    assert uploader.delete(f"/v1/adapters/acme/gc-gone/versions/{gone_v['number']}").status_code == 200
    with Session(engine) as session:
        dataset = session.scalar(select(EvalSuite.dataset_sha256).where(EvalSuite.name == "promo-suite"))
    named = {f["sha256"] for f in kept_v["files"]} | {dataset}
    for sha256 in named | {f["sha256"] for f in gone_v["files"]}:
        copy_in(s3_client, sha256)
    # The deleted version's weights are its own; its config is the same bytes as the kept one's.
    (gone_weights,) = {f["sha256"] for f in gone_v["files"]} - named
    stray = orphan(store)
    before = len(collected_events(engine))
    now = datetime.now(UTC)

    first = service.collect(begin_work, store, grace_s=GRACE.total_seconds(), now=now)
    assert first.collected == [] and first.marked == 2  # seen unnamed: the grace period starts
    with Session(engine) as session:
        assert set(repository.marks(session)) >= {stray, gone_weights}
    # Unnamed for a day: nothing yet, and the marks keep their first time.
    assert service.collect(begin_work, store, grace_s=GRACE.total_seconds(),
                           now=now + timedelta(days=1)).collected == []

    later = service.collect(begin_work, store, grace_s=GRACE.total_seconds(), now=now + GRACE)
    assert sorted(later.collected) == sorted([stray, gone_weights])
    assert keys(s3_client) == named  # what a version row or a suite names stays
    (event,) = collected_events(engine)[before:]
    assert event.actor == service.ACTOR and sorted(event.after["sha256"]) == sorted([stray, gone_weights])
    with Session(engine) as session:
        assert not set(repository.marks(session)) & {stray, gone_weights}

    again = service.collect(begin_work, store, grace_s=GRACE.total_seconds(), now=now + 2 * GRACE)
    assert again.collected == [] and keys(s3_client) == named
    assert len(collected_events(engine)) == before + 1
    assert uploader.get(f"/v1/adapters/acme/gc-kept/versions/{kept_v['number']}/download").status_code == 200


def test_a_blob_written_recently_waits_however_old_its_mark(store, begin_work, engine, s3_client):
    """A mark made long ago (a blob unnamed, then stored again by a failed upload) does not
    outrun the blob's own last write."""
    fresh = orphan(store)
    now = datetime.now(UTC)
    with unit_of_work(engine) as session:
        repository.add_marks(session, [fresh], now - 2 * GRACE)
    assert service.collect(begin_work, store, grace_s=GRACE.total_seconds(), now=now).collected == []
    assert fresh in keys(s3_client)
    assert fresh in service.collect(begin_work, store, grace_s=GRACE.total_seconds(),
                                    now=now + GRACE).collected


def test_every_attestation_subject_is_named(engine, make_ready, client_for, admin, promo_pools):
    from tests.support.promotions import promote

    version = make_ready("gc-attested")
    promote(client_for("acme_uploader"), admin, promo_pools["open"], version)
    with Session(engine) as session:
        names = service.referenced(session)
    assert {f["sha256"] for f in version["files"]} <= names


def test_a_collection_and_an_upload_of_the_same_bytes_never_leave_a_dangling_name(
        store, begin_work, engine, s3_client, promo_pools):
    """The collector deletes under each blob's exclusive lock and reads the references again
    after taking it; an upload checks its blobs under their shared locks and records them before
    it lets go. Whichever comes first, the other sees it."""
    grace_s = GRACE.total_seconds()
    now = datetime.now(UTC) + GRACE  # the blobs below are past the grace period by their write
    with Session(engine) as session:
        base_id = session.scalar(select(BaseModel.id).where(BaseModel.name == "promo-base"))

    # The collector first: the upload waits, then finds the blob gone and stores it again.
    first = orphan(store)
    with unit_of_work(engine) as session:
        repository.add_marks(session, [first], now - GRACE)
    work = begin_work()
    assert service._collect_batch(work.session, store, [first], now - GRACE, grace_s) == [first]
    answer: list[list[str]] = []
    upload = threading.Thread(target=lambda: answer.append(_held(engine, store, first)))
    upload.start()
    upload.join(timeout=1)
    assert upload.is_alive()  # waiting on the blob's lock while the collector has not committed
    work.commit()
    work.close()
    upload.join(timeout=10)
    assert answer == [[first]]  # missing: the upload puts its bytes again before recording

    # The upload first: the collector waits, then sees the new name and keeps the blob.
    second = orphan(store)
    with unit_of_work(engine) as session:
        repository.add_marks(session, [second], now - GRACE)
    upload_work = begin_work()
    assert service.hold(upload_work.session, store, [second]) == []
    upload_work.session.add(EvalSuite(name=f"gc-race-{second[:8]}", base_model_id=base_id,
                                      dataset_sha256=second, example_count=1,
                                      # A suite as the registry stores one: others list it.
                                      metrics={"exact_match": {"min": 0.5}}, generation={"max_tokens": 8},
                                      created_by="tests"))
    upload_work.session.flush()
    collected: list[list[str]] = []
    collector = threading.Thread(target=lambda: collected.append(_collect(begin_work, store, second, now, grace_s)))
    collector.start()
    collector.join(timeout=1)
    assert collector.is_alive()
    upload_work.commit()
    upload_work.close()
    collector.join(timeout=10)
    assert collected == [[]] and second in keys(s3_client)
    with Session(engine) as session:
        assert session.get(BlobGcMark, second) is None  # named again: no longer marked


def _held(engine, store, sha256: str) -> list[str]:
    with unit_of_work(engine) as session:
        return service.hold(session, store, [sha256])


def _collect(begin_work, store, sha256: str, now: datetime, grace_s: float) -> list[str]:
    work = begin_work()
    try:
        found = service._collect_batch(work.session, store, [sha256], now - timedelta(seconds=grace_s), grace_s)
        work.commit()
        return found
    finally:
        work.close()


def test_the_embedded_default_collects_from_its_folder_on_sqlite(tmp_path):
    """SQLite runs one writer at a time, so no lock is taken; the local store lists and removes
    blobs in its folder, and leaves a writer's staging file alone."""
    from migrations import runner
    from registry.db import make_engine
    from registry.storage.local import LocalStore

    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    runner.upgrade(url)
    engine = make_engine(url)
    store = LocalStore(RegistrySettings(data_dir=tmp_path))
    stray = orphan(store)
    staging = store.path_of(blob_key(stray)).with_name("tmp-staging")
    staging.write_bytes(b"partial")
    now = datetime.now(UTC) + GRACE
    begin = lambda: UnitOfWork(Session(engine, expire_on_commit=False))  # noqa: E731
    try:
        assert service.collect(begin, store, grace_s=GRACE.total_seconds(), now=now - GRACE).marked == 1
        assert service.collect(begin, store, grace_s=GRACE.total_seconds(), now=now).collected == [stray]
        assert not store.has(blob_key(stray)) and staging.exists()
    finally:
        engine.dispose()
