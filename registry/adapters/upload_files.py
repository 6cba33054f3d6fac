"""Turn the received parts (two PEFT files, or one archive of them, each optionally with a
model-signing signature beside them) into the files to check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from registry.adapters import archive, model_card, upload_signature
from registry.adapters.peft_config import FILE as CONFIG_FILE
from registry.adapters.receive import ReceivedFile
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE
from registry.errors import BadRequest, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from registry.settings import RegistrySettings
from signed_digests.digests import file_sha256


@dataclass(frozen=True)
class AdapterFiles:
    config: bytes
    weights: Path
    weights_sha256: str
    weights_size: int
    signature: ReceivedFile | None = None  # model.sig, checked for size only
    model_card: bytes | None = None  # README.md, checked: UTF-8 text of bounded size


def collect(received: list[ReceivedFile], settings: RegistrySettings, workdir: Path) -> AdapterFiles:
    if not received:
        raise Unprocessable(
            "no files were uploaded", code="missing_file",
            hint=f"Send {CONFIG_FILE} and {WEIGHTS_FILE} as 'file' parts, or one archive of them.",
        )
    by_name: dict[str, ReceivedFile] = {}
    for part in received:
        _check_filename(part.filename)
        archive.refuse_pickle(part.filename)
        if part.filename in by_name:
            raise BadRequest(f"{part.filename} was sent twice", code="duplicate_file",
                             hint="Send each file once.")
        by_name[part.filename] = part
    archives = [name for name in by_name if archive.is_archive(name)]
    if archives:
        if len(by_name) > 1:
            raise BadRequest("send one archive, or the two PEFT files, not both", code="mixed_upload",
                             hint="Upload either adapter.tgz alone, or the two files alone.")
        by_name = _unpack(by_name[archives[0]], settings, workdir)
    unknown = sorted(set(by_name) - {CONFIG_FILE, WEIGHTS_FILE, model_card.FILE, upload_signature.FILE})
    if unknown:
        raise UnsupportedMediaType(
            f"{unknown[0]} is not a PEFT adapter file", code="unexpected_file",
            hint=f"Send {CONFIG_FILE} and {WEIGHTS_FILE} (and optionally {model_card.FILE} and "
                 f"{upload_signature.FILE}), or a .tar.gz/.tgz/.tar/.zip of them.",
        )
    for required in (CONFIG_FILE, WEIGHTS_FILE):
        if required not in by_name:
            raise Unprocessable(f"{required} is missing", code="missing_file",
                                hint="A PEFT adapter folder holds adapter_config.json and "
                                     "adapter_model.safetensors (save_pretrained writes both).")
    config, weights = by_name[CONFIG_FILE], by_name[WEIGHTS_FILE]
    if config.size > settings.max_config_bytes:
        raise PayloadTooLarge(f"{CONFIG_FILE} is larger than {settings.max_config_bytes} bytes",
                              code="config_too_large", hint="A PEFT config is a few kilobytes.")
    signature = by_name.get(upload_signature.FILE)
    if signature is not None and signature.size > upload_signature.MAX_BYTES:
        raise PayloadTooLarge(f"{upload_signature.FILE} is larger than {upload_signature.MAX_BYTES} "
                              "bytes", code="signature_too_large",
                              hint="A model-signing bundle signed with a key is a few kilobytes.")
    card = by_name.get(model_card.FILE)
    if card is not None:
        model_card.check_size(card.size)  # before it is read
    card_bytes = None if card is None else card.path.read_bytes()
    if card_bytes is not None:
        model_card.check(card_bytes)
    return AdapterFiles(config=config.path.read_bytes(), weights=weights.path,
                        weights_sha256=weights.sha256, weights_size=weights.size, signature=signature,
                        model_card=card_bytes)


def _unpack(packed: ReceivedFile, settings: RegistrySettings, workdir: Path) -> dict[str, ReceivedFile]:
    unpacked = workdir / "unpacked"
    unpacked.mkdir()
    with packed.path.open("rb") as file:
        paths = archive.extract(file, packed.filename, unpacked, max_bytes=settings.max_upload_bytes,
                                max_files=settings.max_archive_files)
    return {name: ReceivedFile(name, path, file_sha256(path), path.stat().st_size)
            for name, path in paths.items()}


def _check_filename(filename: str | None) -> None:
    if not filename or "/" in filename or "\\" in filename or filename in (".", "..") or "\0" in filename:
        raise BadRequest(f"invalid file name {filename!r}", code="invalid_filename",
                         hint="Send plain file names such as adapter_config.json.")
