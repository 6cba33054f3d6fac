"""Upload a PEFT adapter folder or archive, with a progress bar, waiting out a busy registry."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

import httpx
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from loraplane_client.connection import checked
from signed_digests.digests import file_sha256

SIGNATURE_FILE = "model.sig"
MODEL_CARD_FILE = "README.md"
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
READ_BYTES = 1024 * 1024
RETRY_STATUSES = (429, 503)
MAX_ATTEMPTS = 5  # about half a minute of waiting at the registry's usual Retry-After of 5 s
DEFAULT_RETRY_AFTER_S = 5.0
MAX_RETRY_AFTER_S = 60.0  # a Retry-After longer than this is not waited out whole


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
        # The model card peft writes and a model-signing signature travel with the adapter when
        # they are beside it; the registry keeps the card and verifies the signature.
        return [source / name for name in (*PEFT_FILES, MODEL_CARD_FILE, SIGNATURE_FILE)
                if (source / name).is_file()]
    if source.is_file():
        return [source]
    raise FileNotFoundError(f"{source} does not exist")


def push(client: httpx.Client, source: Path, tenant: str, name: str, *,
         base_model: str | None = None, fold_scaling: bool = False, show_progress: bool = True,
         max_attempts: int = MAX_ATTEMPTS) -> tuple[dict, bool]:
    """Upload, and when the registry answers 429 or 503 (too many uploads at once, or a store
    briefly away) wait as long as its Retry-After says and send again, up to max_attempts in all.
    Sending again is safe: a refused upload stored nothing, and the same bytes twice give the
    same version."""
    paths = files_to_send(source)
    total = sum(path.stat().st_size for path in paths)
    data = {"base_model": base_model} if base_model else {}
    if fold_scaling:
        data["fold_scaling"] = "true"
    weights = [path for path in paths if path.name == PEFT_FILES[1]]
    if weights:
        # Declared before the files, so the registry can stream the weights straight to storage
        # and check that the bytes it got are the bytes we sent.
        data["weights_sha256"] = file_sha256(weights[0])
    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=Console(stderr=True), disable=not show_progress,
                  transient=False) as progress:
        task = progress.add_task(f"{tenant}/{name}", total=total)

        def send() -> httpx.Response:
            progress.reset(task)
            with ExitStack() as stack:
                files = [("file", (path.name, ProgressReader(stack.enter_context(path.open("rb")),
                                                             lambda n: progress.advance(task, n))))
                         for path in paths]
                # httpx reads any object with read/seek/tell; its type asks for IO[bytes].
                response = client.post(f"/v1/adapters/{tenant}/{name}/versions",
                                       files=files, data=data)  # type: ignore[arg-type]
            if response.status_code in RETRY_STATUSES:
                raise RegistryBusy(response)
            return response

        retrying = Retrying(
            stop=stop_after_attempt(max_attempts), wait=_retry_after, reraise=True,
            retry=retry_if_exception_type(RegistryBusy),
            before_sleep=lambda state: _say_waiting(progress.console, state, max_attempts))
        try:
            response = retrying(send)
        except RegistryBusy as busy:  # still busy after the last attempt: say why, as for any refusal
            response = busy.response
    return checked(response), response.status_code == 201


class RegistryBusy(Exception):
    """A 429 or 503: the registry asks to be asked again later."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response

    @property
    def retry_after_s(self) -> float:
        """Retry-After in seconds (RFC 9110 allows a date too, which counts as the default)."""
        value = self.response.headers.get("Retry-After", "")
        seconds = float(value) if value.strip().isdigit() else DEFAULT_RETRY_AFTER_S
        return min(max(seconds, 1.0), MAX_RETRY_AFTER_S)

    def reason(self) -> str:
        try:
            return self.response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return self.response.reason_phrase


def _busy(state: RetryCallState) -> RegistryBusy:
    """What the failed attempt raised: only a RegistryBusy is retried (retry_if_exception_type)."""
    failure = state.outcome.exception() if state.outcome is not None else None
    if not isinstance(failure, RegistryBusy):
        raise TypeError(f"retrying after {failure!r}, not after a RegistryBusy")
    return failure


def _retry_after(state: RetryCallState) -> float:
    return _busy(state).retry_after_s


def _say_waiting(console: Console, state: RetryCallState, max_attempts: int) -> None:
    busy = _busy(state)
    console.print(f"registry busy (HTTP {busy.response.status_code}: {busy.reason()}); "
                  f"sending again in {busy.retry_after_s:g} s, attempt {state.attempt_number + 1} "
                  f"of {max_attempts}", soft_wrap=True, markup=False, highlight=False)
