"""Everything an upload must pass before any byte of it is stored."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from registry.adapters import lora_layout, safetensors_check
from registry.adapters.lora_layout import LoraLayout
from registry.adapters.peft_config import LoraSpec
from registry.adapters.upload_files import AdapterFiles
from registry.base_models import repository as base_models
from registry.base_models import stored_tables
from registry.base_models.module_table import ModuleTable
from registry.errors import Unprocessable
from registry.names import refuse_control_characters
from registry.tables import BaseModel

# Parsing JSON costs many times its size in memory (an empty list is 56 bytes for 3 bytes of
# text), so a header is held to what a LoRA of its base can need: two tensors per module per
# layer (module_table.lora_tensor_bound), each a name of at most 300 characters with its dtype,
# shape and offsets.
HEADER_BYTES_PER_TENSOR = 512
HEADER_METADATA_BYTES = 256 * 1024


@dataclass(frozen=True)
class TargetBase:
    id: int
    name: str
    table: ModuleTable


def resolve_base(session: Session, spec: LoraSpec, requested: str | None) -> TargetBase:
    """The base the adapter is for: the one asked for, which its config must name."""
    refuse_control_characters(spec.base_model_name, "adapter_config.json: base_model_name_or_path")
    claimed = base_models.by_name_or_alias(session, spec.base_model_name)
    if requested is None:
        if claimed is None:
            raise Unprocessable(
                f"adapter_config.json: base_model_name_or_path {spec.base_model_name!r} "
                "is not a registered base model",
                code="unknown_base_model",
                hint="Pass base_model, or have a global admin add this name as an alias of "
                f"the base it was trained on: loraplane base-model alias add BASE {spec.base_model_name!r} "
                "(POST /v1/base-models/BASE/aliases).",
            )
        return _target(session, claimed)
    refuse_control_characters(requested, "base_model")
    target = base_models.by_name(session, requested)
    if target is None:
        raise Unprocessable(f"base model {requested!r} is not registered", code="unknown_base_model",
                            hint="List them with GET /v1/base-models.")
    if claimed is None or claimed.id != target.id:
        raise Unprocessable(
            f"adapter_config.json: base_model_name_or_path {spec.base_model_name!r} does not match "
            f"the target base model {target.name!r} or its aliases",
            code="wrong_base_model",
            hint="Upload the adapter for the base it was trained on. If it was trained on "
            f"{target.name!r} under that name, a global admin adds it as an alias: loraplane "
            f"base-model alias add {target.name} {spec.base_model_name!r}.",
        )
    return _target(session, target)


def check_weights(files: AdapterFiles, spec: LoraSpec, table: ModuleTable, max_header_bytes: int) -> LoraLayout:
    with files.weights.open("rb") as weights:
        tensors = safetensors_check.read_tensors(weights, files.weights_size,
                                                 header_limit(table, max_header_bytes))
        layout = lora_layout.check_layout(tensors, spec, table)
        for tensor in tensors:
            safetensors_check.check_finite(weights, tensor)
    return layout


def header_limit(table: ModuleTable, max_header_bytes: int) -> safetensors_check.HeaderLimit:
    tensors = table.lora_tensor_bound()
    needed = tensors * HEADER_BYTES_PER_TENSOR + HEADER_METADATA_BYTES
    if needed >= max_header_bytes:
        return safetensors_check.HeaderLimit(max_header_bytes, "LORAPLANE_MAX_HEADER_BYTES on the registry")
    return safetensors_check.HeaderLimit(
        needed, f"a LoRA of this {table.num_layers}-layer base has at most {tensors} tensors, each with "
                f"an entry of at most {HEADER_BYTES_PER_TENSOR} bytes")


def _target(session: Session, row: BaseModel) -> TargetBase:
    return TargetBase(id=row.id, name=row.name, table=stored_tables.table_of(session, row))
