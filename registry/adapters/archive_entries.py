"""What every archive reader checks entry by entry, whatever the format: counts, sizes, names."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import IO

from registry.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# The PEFT files, and the model-signing signature that may sit beside them.
WANTED = ("adapter_config.json", "adapter_model.safetensors", "model.sig")
REBUILD_HINT = "Re-create the archive of the PEFT folder (tar czf adapter.tgz DIR, or zip -r)."
SLIM_HINT = "Archive only the PEFT adapter folder."
COPY_CHUNK = 1024 * 1024


def refuse_pickle(filename: str) -> None:
    if filename.lower().endswith(PICKLE_SUFFIXES):
        raise UnsupportedMediaType(
            f"{filename}: pickled weights are refused, because loading them can run arbitrary code",
            code="pickle_refused",
            hint="Save with safe_serialization=True to get adapter_model.safetensors.",
        )


def refuse_link(filename: str, name: str) -> BadRequest:
    return BadRequest(f"{filename}: member {name[:200]!r} is a link or special file", code="archive_link",
                      hint="Archive plain files only (tar --dereference).")


def refuse_compression(filename: str, method: str) -> UnsupportedMediaType:
    return UnsupportedMediaType(
        f"{filename} is compressed with {method}; only gzip (.tar.gz, .tgz) and zip's deflate are accepted",
        code="unsupported_compression", hint=REBUILD_HINT)


def too_large(filename: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"{filename} expands to more than {max_bytes} bytes; the limit is {max_bytes}",
                           code="archive_too_large", hint=SLIM_HINT)


class Entries:
    """Admits the entries of one archive as they are listed: their number, their declared sizes
    and their names. Says which of them are the PEFT files, and where to extract those."""

    def __init__(self, filename: str, workdir: Path, *, max_bytes: int, max_entries: int) -> None:
        self.filename, self.workdir = filename, workdir
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.count = self.bytes = 0
        self.extracted: dict[str, Path] = {}

    def check_count(self, count: int) -> None:
        if count > self.max_entries:
            raise PayloadTooLarge(f"{self.filename} holds more than {self.max_entries} entries",
                                  code="too_many_files", hint=SLIM_HINT)

    def admit(self, name: str, size: int, *, is_file: bool) -> Path | None:
        """Count an entry; return where to extract it when it is one of the wanted files."""
        _check_name(name, self.filename)
        self.count += 1
        self.check_count(self.count)
        self.bytes += size if is_file else 0
        if self.bytes > self.max_bytes:
            raise too_large(self.filename, self.max_bytes)
        if not is_file:
            return None
        refuse_pickle(name)
        path = PurePosixPath(name)
        if path.name not in WANTED or len(path.parts) > 2:
            return None
        if path.name in self.extracted:
            raise BadRequest(f"{self.filename} holds more than one {path.name}", code="ambiguous_archive",
                             hint="Archive exactly one PEFT adapter folder.")
        self.extracted[path.name] = self.workdir / path.name
        return self.extracted[path.name]

    def copy(self, source: IO[bytes], target: Path, *, name: str, size: int) -> None:
        """Headers can lie about sizes: count what really comes out."""
        copied = 0
        with open(target, "wb") as sink:
            while chunk := source.read(COPY_CHUNK):
                copied += len(chunk)
                if copied > size:
                    raise PayloadTooLarge(f"{self.filename}:{name} expands beyond its declared size",
                                          code="archive_too_large", hint=REBUILD_HINT)
                sink.write(chunk)


def _check_name(name: str, filename: str) -> None:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts:
        raise BadRequest(f"{filename}: member {name[:200]!r} has an absolute path or '..'",
                         code="unsafe_archive_path", hint="Archive the folder with relative paths.")
