"""A key folder: one PEM per key and `keys.json`, which names the signing key and when each
rotated-out key stops being trusted, with every key's public half. Every registry process reads
it at each use (it changes only at rotation), so a rotation by one process is seen by all that
share the folder. A rotated-out key's PEM is deleted once its trust has ended (an emergency's,
once its end has been announced for EMERGENCY_NOTICE): nothing can sign with it any more, and
its public half stays to recognise what it signed."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.attestation_keys.published import PublishedKey, raw_public
from signed_digests.provenance import key_id


class FolderKeyring:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def signing_key_id(self) -> str:
        return self._index()["current"]

    def sign(self, kid: str, message: bytes) -> bytes:
        return _load_private(self.folder / f"{kid}.pem").sign(message)

    def held(self) -> tuple[int, list[PublishedKey]]:
        index = self._index()
        keys = [self._published(kid, meta) for kid, meta in sorted(index["keys"].items())]
        if any(self._expired(key) for key in keys):
            self._destroy_expired()
        return index["version"], keys

    def rotate(self, overlap: timedelta) -> str:
        with self._locked():
            index = self._read() or self._create()
            retiring = index["current"]
            new = self._new_key()
            now = datetime.now(UTC)
            index["keys"][retiring].update(not_after=(now + overlap).isoformat(), emergency=not overlap)
            index["keys"][new] = {"created": now.isoformat(), "not_after": None,
                                  "public_key": self._public_b64(new)}
            index["current"], index["version"] = new, index["version"] + 1
            self._write(index)
            return new

    def _published(self, kid: str, meta: dict) -> PublishedKey:
        not_after = datetime.fromisoformat(meta["not_after"]) if meta.get("not_after") else None
        public = base64.b64decode(meta["public_key"]) if meta.get("public_key") else \
            raw_public(_load_private(self.folder / f"{kid}.pem").public_key())
        return PublishedKey(kid, public, not_after, bool(meta.get("emergency")))

    def _expired(self, key: PublishedKey) -> bool:
        """A rotated-out key no bundle names any more, whose private half is still here."""
        return (not key.announced_at(datetime.now(UTC))) and (self.folder / f"{key.key_id}.pem").exists()

    def _destroy_expired(self) -> None:
        with self._locked():
            index = self._read()
            if index is None:  # no index (removed meanwhile): no key here to destroy
                return
            for kid, meta in index["keys"].items():
                if not self._expired(self._published(kid, meta)):
                    continue
                meta.setdefault("public_key", self._public_b64(kid))  # kept, to recognise its signatures
                self._write(index)
                (self.folder / f"{kid}.pem").unlink(missing_ok=True)
                _load_private.cache_clear()

    def _public_b64(self, kid: str) -> str:
        return base64.b64encode(raw_public(_load_private(self.folder / f"{kid}.pem").public_key())).decode()

    def _index(self) -> dict:
        index = self._read()
        if index is None:
            with self._locked():
                index = self._read() or self._create()
        return index

    def _create(self) -> dict:
        kid = self._new_key()
        index = {"version": 1, "current": kid,
                 "keys": {kid: {"created": datetime.now(UTC).isoformat(), "not_after": None,
                                "public_key": self._public_b64(kid)}}}
        self._write(index)
        return index

    def _new_key(self) -> str:
        private = Ed25519PrivateKey.generate()
        kid = key_id(raw_public(private.public_key()))
        pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        descriptor = os.open(self.folder / f"{kid}.pem", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(pem)
        return kid

    def _read(self) -> dict | None:
        try:
            return json.loads((self.folder / "keys.json").read_text())
        except FileNotFoundError:
            return None

    def _write(self, index: dict) -> None:
        staging = self.folder / f".keys.json.{os.getpid()}"
        staging.write_text(json.dumps(index, indent=2))
        os.replace(staging, self.folder / "keys.json")  # readers see the old index or the new

    @contextlib.contextmanager
    def _locked(self):
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with (self.folder / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # processes on one machine share this folder
            yield


@lru_cache(maxsize=64)
def _load_private(path: Path) -> Ed25519PrivateKey:
    private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(private, Ed25519PrivateKey):  # the keyring writes Ed25519 keys only
        raise ValueError(f"{path} is not an Ed25519 private key")
    return private
