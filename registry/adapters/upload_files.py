"""Turn the uploaded parts (two PEFT files, or one archive of them) into the files to check."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from registry.adapters import archive
from registry.adapters.peft_config import FILE as CONFIG_FILE
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE
from registry.errors import BadRequest, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from registry.settings import RegistrySettings


@dataclass(frozen=True)
class UploadedFile:
    filename: str
    file: BinaryIO


@dataclass(frozen=True)
class AdapterFiles:
    config: bytes
    weights: BinaryIO
    weights_size: int


def collect(parts: list[UploadedFile], settings: RegistrySettings, workdir: Path) -> AdapterFiles:
    if not parts:
        raise Unprocessable(
            "no files were uploaded", code="missing_file",
            hint=f"Send {CONFIG_FILE} and {WEIGHTS_FILE} as 'file' parts, or one archive of them.",
        )
    by_name: dict[str, BinaryIO] = {}
    for part in parts:
        _check_filename(part.filename)
        archive.refuse_pickle(part.filename)
        if part.filename in by_name:
            raise BadRequest(f"{part.filename} was sent twice", code="duplicate_file",
                             hint="Send each file once.")
        by_name[part.filename] = part.file
    archives = [name for name in by_name if archive.is_archive(name)]
    if archives:
        if len(by_name) > 1:
            raise BadRequest("send one archive, or the two PEFT files, not both", code="mixed_upload",
                             hint="Upload either adapter.tgz alone, or the two files alone.")
        extracted = archive.extract(
            by_name[archives[0]], archives[0], workdir,
            max_bytes=settings.max_upload_bytes, max_files=settings.max_archive_files,
        )
        by_name = {name: path.open("rb") for name, path in extracted.items()}
    unknown = sorted(set(by_name) - {CONFIG_FILE, WEIGHTS_FILE})
    if unknown:
        raise UnsupportedMediaType(
            f"{unknown[0]} is not a PEFT adapter file", code="unexpected_file",
            hint=f"Send {CONFIG_FILE} and {WEIGHTS_FILE}, or a .tar.gz/.tgz/.tar/.zip of them.",
        )
    for required in (CONFIG_FILE, WEIGHTS_FILE):
        if required not in by_name:
            raise Unprocessable(f"{required} is missing", code="missing_file",
                                hint="A PEFT adapter folder holds adapter_config.json and "
                                     "adapter_model.safetensors (save_pretrained writes both).")
    return AdapterFiles(
        config=_read_config(by_name[CONFIG_FILE], settings.max_config_bytes),
        weights=by_name[WEIGHTS_FILE],
        weights_size=_size_of(by_name[WEIGHTS_FILE]),
    )


def _check_filename(filename: str) -> None:
    if not filename or "/" in filename or "\\" in filename or filename in (".", "..") or "\0" in filename:
        raise BadRequest(f"invalid file name {filename!r}", code="invalid_filename",
                         hint="Send plain file names such as adapter_config.json.")


def _read_config(file: BinaryIO, limit: int) -> bytes:
    file.seek(0)
    data = file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"{CONFIG_FILE} is larger than {limit} bytes", code="config_too_large")
    return data


def _size_of(file: BinaryIO) -> int:
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(0)
    return size
