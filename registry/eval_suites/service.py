"""Create and read eval suites. The dataset lives in the store as canonical JSONL, addressed by
its sha256, so two suites with the same rows share one blob and a worker can verify what it reads."""

from __future__ import annotations

import hashlib
import json

from pydantic import ValidationError
from sqlalchemy.orm import Session

from registry import audit
from registry.adapters.artifact import blob_key
from registry.blob_gc import service as blob_gc
from registry.base_models import service as base_models
from registry.errors import Conflict, NotFound, Unprocessable
from registry.eval_suites import repository
from registry.eval_suites.schemas import Example, Generation, SuiteCreate, SuiteMetrics, SuiteOut
from registry.names import check_name
from registry.auth.principal import Principal, Role
from registry.auth.repository import find_tenant
from registry.rows import existing
from registry.storage.base import ArtifactStore
from registry.tables import BaseModel, EvalSuite, Tenant
from registry.tenants import quotas as tenant_quotas

RECREATE = "Recreate the suite under a new name."
OWNERS = {Role.ADMIN, Role.UPLOADER}  # who may create a tenant's suite


def dataset_bytes(examples: list[Example]) -> bytes:
    lines = (json.dumps(e.model_dump(), ensure_ascii=False, sort_keys=True) for e in examples)
    return ("\n".join(lines) + "\n").encode()


def create(session: Session, store: ArtifactStore, spec: SuiteCreate, principal: Principal) -> SuiteOut:
    """A global suite (global admins), or a tenant's, named tenant/name (its admins and
    uploaders): only that tenant sees it and its dataset, and evaluates with it."""
    check_name(spec.name, "eval suite")
    tenant = None
    if spec.tenant is None:
        principal.require_global_admin()
    else:
        principal.require(OWNERS, check_name(spec.tenant, "tenant"))
        tenant = find_tenant(session, spec.tenant)
        if tenant is None:
            raise NotFound(f"tenant {spec.tenant!r} does not exist", code="tenant_not_found",
                           hint="A global admin creates it: loraplane tenant create NAME.")
        _check_quota(session, tenant)
    ref = spec.name if tenant is None else f"{tenant.name}/{spec.name}"
    base = base_models.get(session, spec.base_model)
    if repository.suite_exists(session, ref):
        raise Conflict(f"eval suite {ref!r} already exists", code="already_exists",
                       hint="Suites are immutable; create one under a new name.")
    data = dataset_bytes(spec.examples)
    sha256 = hashlib.sha256(data).hexdigest()
    # Under the blob's lock until commit: the collector cannot take it between the put (skipped
    # when the same bytes are stored) and the row that names it.
    blob_gc.hold(session, store, [sha256])
    store.put_bytes(blob_key(sha256), data)  # content-addressed: a rollback leaves a reusable blob
    row = EvalSuite(
        name=ref, tenant_id=tenant.id if tenant else None, base_model_id=base.id, dataset_sha256=sha256,
        example_count=len(spec.examples),
        metrics=spec.metrics.model_dump(exclude_none=True),
        generation=spec.generation.model_dump(),
        created_by=principal.label,
    )
    session.add(row)
    session.flush()
    return audit.record_created(session, to_out(session, row), actor=principal.label, action="eval_suite.create",
                                subject=f"eval-suite/{row.name}", tenant_id=row.tenant_id)


def _check_quota(session: Session, tenant: Tenant) -> None:
    """A tenant owns a bounded number of suites: each one is work the shared workers may be asked for."""
    quota = tenant_quotas.suites(tenant)
    owned = repository.suites_of_tenant(session, tenant.id)
    if owned >= quota.limit:
        raise Conflict(f"tenant {tenant.name!r} owns {owned} eval suites, its quota "
                       f"({quota.source} is {quota.limit})", code="quota_exceeded",
                       hint=f"Reuse one of its suites, or {quota.more}.")


def get(session: Session, principal: Principal, ref: str) -> SuiteOut:
    """A suite the principal may see; another tenant's is answered as one that does not exist."""
    row = repository.find_suite(session, ref)
    if row is None or not _visible(session, row, principal):
        raise _not_found(ref)
    return to_out(session, row)


def get_row(session: Session, name: str) -> EvalSuite:
    """Any suite, for the registry's own use (the pools' suites, queued evaluations)."""
    row = repository.find_suite(session, name)
    if row is None:
        raise _not_found(name)
    return row


def usable_for(session: Session, ref: str, tenant_id: int) -> EvalSuite:
    """A suite that may evaluate the versions of `tenant_id`: a global one, or that tenant's own.
    Another tenant's is answered exactly as one that does not exist."""
    row = repository.find_suite(session, ref)
    if row is None or row.tenant_id not in (None, tenant_id):
        raise _not_found(ref)
    return row


def _not_found(ref: str) -> NotFound:
    return NotFound(f"eval suite {ref!r} does not exist", code="suite_not_found",
                    hint="List them with GET /v1/eval-suites.")


def _visible(session: Session, row: EvalSuite, principal: Principal) -> bool:
    if row.tenant_id is None or principal.is_global_admin:
        return True
    return existing(session, Tenant, row.tenant_id).name == principal.tenant


def require_for_base(session: Session, names: list[str], base_id: int, base_name: str) -> None:
    """Every name is a global suite for this base; pools and evaluations depend on it."""
    for name in names:
        row = repository.find_suite(session, name)
        if row is None:
            raise Unprocessable(f"unknown eval suite {name!r}", code="unknown_suite",
                                hint="Create it first with POST /v1/eval-suites.")
        if row.tenant_id is not None:
            raise Unprocessable(
                f"eval suite {name!r} belongs to a tenant; a pool requires global suites of every "
                "adapter it serves", code="suite_not_global",
                hint="Create a global suite (POST /v1/eval-suites without tenant) for the pool.")
        if row.base_model_id != base_id:
            raise Unprocessable(
                f"eval suite {name!r} is for another base model than {base_name!r}",
                code="suite_base_mismatch", hint="Use a suite built for this base model.")


def list_page(session: Session, principal: Principal, *, limit: int,
              cursor: str | None) -> tuple[list[SuiteOut], str | None]:
    """Global suites and the principal's tenant's (a global admin's: all)."""
    tenant = find_tenant(session, principal.tenant) if principal.tenant else None
    rows, next_cursor = repository.page_of_suites(session, limit=limit, cursor=cursor,
                                                  tenant_id=tenant.id if tenant else None,
                                                  every_tenant=principal.is_global_admin)
    return [to_out(session, row) for row in rows], next_cursor


def load_examples(store: ArtifactStore, suite: EvalSuite) -> list[Example]:
    """The suite's rows, verified against the digest recorded at creation. A dataset that cannot
    be read raises Unprocessable: reading it again would give the same answer."""
    try:
        data = store.get_bytes(blob_key(suite.dataset_sha256))
    except NotFound:
        raise Unprocessable(f"the dataset of eval suite {suite.name!r} is missing from the store",
                            code="dataset_invalid", hint=RECREATE) from None
    if hashlib.sha256(data).hexdigest() != suite.dataset_sha256:
        raise Unprocessable(f"the dataset of eval suite {suite.name!r} is damaged in the store",
                            code="dataset_corrupt", hint=RECREATE)
    return parse_dataset(data, suite.name)


def parse_dataset(data: bytes, suite_name: str) -> list[Example]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _unreadable(suite_name, f"byte {error.start} is not UTF-8") from None
    examples = []
    # JSONL rows end at "\n" only: str.splitlines() also breaks at U+0085, U+2028, U+2029 and
    # other separators that json.dumps leaves unescaped inside a string.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line:
            continue
        try:
            examples.append(Example.model_validate_json(line))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise _unreadable(suite_name, f"line {number}: {where + ': ' if where else ''}"
                                          f"{first['msg']}") from None
    if not examples:
        raise _unreadable(suite_name, "it has no rows")
    return examples


def _unreadable(suite_name: str, detail: str) -> Unprocessable:
    return Unprocessable(f"the dataset of eval suite {suite_name!r} cannot be read: {detail}",
                         code="dataset_invalid", hint=RECREATE)


def to_out(session: Session, row: EvalSuite) -> SuiteOut:
    base = existing(session, BaseModel, row.base_model_id)
    tenant = session.get(Tenant, row.tenant_id) if row.tenant_id is not None else None
    return SuiteOut(
        name=row.name, tenant=tenant.name if tenant else None, base_model=base.name,
        dataset_sha256=row.dataset_sha256,
        example_count=row.example_count, metrics=SuiteMetrics.model_validate(row.metrics),
        generation=Generation.model_validate(row.generation), created_by=row.created_by,
        created_at=row.created_at,
    )
