"""The artifact a version serves when it is not the upload itself: the scaling folded into the
weights (scaling_fold.py), written beside the upload and checked again as an upload is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from registry.adapters import peft_config, scaling_fold, validation
from registry.adapters.lora_layout import LoraLayout
from registry.adapters.peft_config import LoraSpec
from registry.adapters.upload_files import AdapterFiles
from registry.base_models.module_table import ModuleTable
from registry.settings import RegistrySettings
from signed_digests.digests import file_sha256


@dataclass(frozen=True)
class ServedArtifact:
    files: AdapterFiles
    spec: LoraSpec
    layout: LoraLayout


def fold(files: AdapterFiles, spec: LoraSpec, layout: LoraLayout, table: ModuleTable,
         settings: RegistrySettings, workdir: Path) -> ServedArtifact:
    folded = scaling_fold.fold(spec, layout, files.weights, workdir, settings.max_upload_bytes)
    served = AdapterFiles(config=folded.config, weights=folded.weights,
                          weights_sha256=file_sha256(folded.weights),
                          weights_size=folded.weights.stat().st_size, model_card=files.model_card)
    served_spec = peft_config.parse_config(served.config)
    # The derived bytes pass the same checks as an upload, against the same base.
    return ServedArtifact(served, served_spec,
                          validation.check_weights(served, served_spec, table, settings.max_header_bytes))
