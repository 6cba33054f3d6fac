"""Create and read eval suites. The dataset lives in the store as canonical JSONL, addressed by
its sha256, so two suites with the same rows share one blob and a worker can verify what it reads."""

from __future__ import annotations

import hashlib
import json

from pydantic import ValidationError
from sqlalchemy.orm import Session

from registry import audit
from registry.adapters.artifact import blob_key
from registry.base_models import service as base_models
from registry.errors import Conflict, NotFound, Unprocessable
from registry.eval_suites import repository
from registry.eval_suites.schemas import Example, Generation, SuiteCreate, SuiteMetrics, SuiteOut
from registry.names import check_name
from registry.storage.base import ArtifactStore
from registry.tables import BaseModel, EvalSuite

RECREATE = "Recreate the suite under a new name."


def dataset_bytes(examples: list[Example]) -> bytes:
    lines = (json.dumps(e.model_dump(), ensure_ascii=False, sort_keys=True) for e in examples)
    return ("\n".join(lines) + "\n").encode()


def create(session: Session, store: ArtifactStore, spec: SuiteCreate, *, actor: str) -> SuiteOut:
    check_name(spec.name, "eval suite")
    base = base_models.get(session, spec.base_model)
    if repository.suite_exists(session, spec.name):
        raise Conflict(f"eval suite {spec.name!r} already exists", code="already_exists",
                       hint="Suites are immutable; create one under a new name.")
    data = dataset_bytes(spec.examples)
    sha256 = hashlib.sha256(data).hexdigest()
    store.put_bytes(blob_key(sha256), data)  # content-addressed: a rollback leaves a reusable blob
    row = EvalSuite(
        name=spec.name, base_model_id=base.id, dataset_sha256=sha256,
        example_count=len(spec.examples),
        metrics=spec.metrics.model_dump(exclude_none=True),
        generation=spec.generation.model_dump(),
        created_by=actor,
    )
    session.add(row)
    session.flush()
    return audit.record_created(session, to_out(row, base), actor=actor, action="eval_suite.create",
                                subject=f"eval-suite/{row.name}")


def get(session: Session, name: str) -> SuiteOut:
    row = get_row(session, name)
    return to_out(row, session.get(BaseModel, row.base_model_id))


def get_row(session: Session, name: str) -> EvalSuite:
    row = repository.find_suite(session, name)
    if row is None:
        raise NotFound(f"eval suite {name!r} does not exist", code="suite_not_found",
                       hint="List them with GET /v1/eval-suites.")
    return row


def require_for_base(session: Session, names: list[str], base_id: int, base_name: str) -> None:
    """Every name is a suite for this base; pools and evaluations depend on it."""
    for name in names:
        row = repository.find_suite(session, name)
        if row is None:
            raise Unprocessable(f"unknown eval suite {name!r}", code="unknown_suite",
                                hint="Create it first with POST /v1/eval-suites.")
        if row.base_model_id != base_id:
            raise Unprocessable(
                f"eval suite {name!r} is for another base model than {base_name!r}",
                code="suite_base_mismatch", hint="Use a suite built for this base model.")


def list_page(session: Session, *, limit: int, cursor: str | None) -> tuple[list[SuiteOut], str | None]:
    rows, next_cursor = repository.page_of_suites(session, limit=limit, cursor=cursor)
    return [to_out(row, session.get(BaseModel, row.base_model_id)) for row in rows], next_cursor


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


def to_out(row: EvalSuite, base: BaseModel) -> SuiteOut:
    return SuiteOut(
        name=row.name, base_model=base.name, dataset_sha256=row.dataset_sha256,
        example_count=row.example_count, metrics=SuiteMetrics.model_validate(row.metrics),
        generation=Generation.model_validate(row.generation), created_by=row.created_by,
        created_at=row.created_at,
    )
