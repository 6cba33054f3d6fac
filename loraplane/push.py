"""Upload a PEFT adapter folder or archive, with a progress bar."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

import httpx
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from loraplane.client import checked
from loraplane.digests import file_sha256

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
READ_BYTES = 1024 * 1024


class ProgressReader:
    """A file wrapper that advances a progress bar as httpx streams it.

    httpx asks for 64 KiB at a time; handing it a MiB makes far fewer, larger socket writes.
    """

    def __init__(self, file: BinaryIO, advance) -> None:
        self._file, self._advance = file, advance

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size if size < 0 else max(size, READ_BYTES))
        self._advance(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def fileno(self) -> int:
        return self._file.fileno()


def files_to_send(source: Path) -> list[Path]:
    if source.is_dir():
        missing = [name for name in PEFT_FILES if not (source / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{source} has no {missing[0]}; is it a PEFT adapter folder?")
        return [source / name for name in PEFT_FILES]
    if source.is_file():
        return [source]
    raise FileNotFoundError(f"{source} does not exist")


def push(client: httpx.Client, source: Path, tenant: str, name: str, *,
         base_model: str | None = None, show_progress: bool = True) -> tuple[dict, bool]:
    paths = files_to_send(source)
    total = sum(path.stat().st_size for path in paths)
    data = {"base_model": base_model} if base_model else {}
    weights = [path for path in paths if path.name == PEFT_FILES[1]]
    if weights:
        # Declared before the files, so the registry can stream the weights straight to storage
        # and check that the bytes it got are the bytes we sent.
        data["weights_sha256"] = file_sha256(weights[0])
    with ExitStack() as stack:
        progress = stack.enter_context(
            Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                     TransferSpeedColumn(), console=Console(stderr=True),
                     disable=not show_progress, transient=False)
        )
        task = progress.add_task(f"{tenant}/{name}", total=total)
        files = [
            ("file", (path.name, ProgressReader(stack.enter_context(path.open("rb")),
                                                lambda n: progress.advance(task, n))))
            for path in paths
        ]
        response = client.post(f"/v1/adapters/{tenant}/{name}/versions", files=files, data=data)
    return checked(response), response.status_code == 201
