"""Verify a model-signing bundle sent beside an adapter (model.sig) against its tenant's keys.

The bundle must verify with one of the tenant's unrevoked keys, and the files it signs must be
exactly the uploaded adapter files, with their sha256. Those digests were taken while the files
arrived, so nothing is hashed again: only signatures made with model-signing's default file
serialization and sha256 are accepted (sharded or blake digests would need the bytes re-read).
model-signing's own `verifying.Config.verify` is not used because it hashes the folder again and
honours the ignore_paths the signer chose; the signed manifest is compared here instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature

from registry.adapters.peft_config import FILE as CONFIG_FILE
from registry.adapters.receive import ReceivedFile
from registry.adapters.safetensors_check import FILE as WEIGHTS_FILE
from registry.errors import Unprocessable
from registry.signing_keys.public_keys import model_signing_hint
from registry.signing_keys.service import ADD_KEY_HINT, TrustedKey, UploadPolicy

FILE = "model.sig"  # the name model-signing writes by default
MAX_BYTES = 64 * 1024  # a key-signed bundle of two files is about 2 KiB
CODE = "bad_upload_signature"
SIGN_HINT = (f"Sign the adapter folder with one of the tenant's keys (model_signing sign key "
             f"--private_key key.pem --signature DIR/{FILE} DIR) and upload {FILE} with its files.")
# What the library raises for a damaged or foreign bundle: its parsers index and convert fields
# without checking them first. The bundle is at most MAX_BYTES, so nothing here runs long.
MALFORMED = (ValueError, LookupError, TypeError, AttributeError, RecursionError)


@dataclass(frozen=True)
class SignedFile:
    name: str
    sha256: str


def check(signature: ReceivedFile | None, files: list[SignedFile], policy: UploadPolicy,
          tenant: str, workdir: Path) -> dict | None:
    """The record to keep for a verified signature, None for an unsigned upload the tenant
    allows; otherwise a refusal. `workdir` is the upload's staging folder."""
    if signature is None:
        if policy.required:
            raise Unprocessable(f"tenant {tenant!r} requires signed uploads, and this upload has "
                                f"no {FILE}", code="unsigned_upload", hint=SIGN_HINT)
        return None
    if not policy.keys:
        raise Unprocessable(f"{FILE} was sent, but tenant {tenant!r} has no signing keys to verify "
                            "it with", code="no_signing_keys", hint=ADD_KEY_HINT)
    bundle = _read(signature.path)
    key = _signing_key(bundle, policy.keys, tenant)
    signed = _verify(bundle, key, tenant, workdir)
    _check_files(signed, files)
    return {"file": FILE, "sha256": signature.sha256, "key_name": key.name,
            "key_fingerprint": key.fingerprint, "verified_at": datetime.now(UTC).isoformat()}


def _read(path: Path):
    # Imported here: the library takes about a second to import, and most uploads are unsigned.
    from model_signing._signing.sign_sigstore_pb import Signature

    try:
        return Signature.read(path)
    except (*MALFORMED, InvalidSignature) as error:
        raise _refuse(f"{FILE} is not a model-signing bundle ({_describe(error)})") from None


def _signing_key(bundle, keys: tuple[TrustedKey, ...], tenant: str) -> TrustedKey:
    """The key the bundle names by its hint. The hint only picks the key; the signature decides."""
    material = bundle.bundle.verification_material
    if material.public_key is None:
        raise _refuse(f"{FILE} was not signed with a key (it carries a certificate or a Sigstore "
                      "identity); the registry verifies signatures by a tenant's keys")
    if not material.public_key.hint:
        raise _refuse(f"{FILE} does not name the key that signed it (model-signing before 1.0 "
                      "wrote no key hint)")
    for key in keys:
        if model_signing_hint(key.pem) == material.public_key.hint:
            return key
    raise _refuse(f"{FILE} was signed by a key that is not one of the signing keys of tenant "
                  f"{tenant!r} (key hint {material.public_key.hint[:16]})")


def _verify(bundle, key: TrustedKey, tenant: str, workdir: Path):
    from model_signing._signing.sign_ec_key import Verifier

    # The library's verifier reads its key from a file.
    key_file = workdir / f"signing-key-{key.fingerprint}.pem"
    key_file.write_text(key.pem)
    try:
        return Verifier(key_file).verify(bundle)
    except InvalidSignature:
        raise _refuse(f"the signature in {FILE} does not verify with signing key {key.name!r} of "
                      f"tenant {tenant!r}") from None
    except MALFORMED as error:
        raise _refuse(f"{FILE} could not be verified with signing key {key.name!r} of tenant "
                      f"{tenant!r} ({_describe(error)})") from None


def _check_files(signed, files: list[SignedFile]) -> None:
    serialization = signed.serialization_type
    method, hash_type = serialization.get("method"), serialization.get("hash_type")
    descriptors = list(signed.resource_descriptors())
    algorithms = {d.digest.algorithm for d in descriptors}
    if method != "files" or hash_type != "sha256" or algorithms - {"sha256"}:
        raise _refuse(f"{FILE} digests the files by {method}/{hash_type}; the registry verifies "
                      "whole-file sha256 digests",
                      hint="Sign with model-signing's default serialization (files, sha256): no "
                           "shard or blake options.")
    signed_digests = {d.identifier: d.digest.digest_hex for d in descriptors}
    uploaded = {f.name: f.sha256 for f in files}
    problems = [f"it lists {name}, which is not one of the uploaded adapter files "
                f"({', '.join(sorted(uploaded))})"
                for name in sorted(set(signed_digests) - set(uploaded))]
    problems += [f"it does not list {name}" for name in sorted(set(uploaded) - set(signed_digests))]
    problems += [f"{name} has sha256 {uploaded[name]}, but {FILE} signs {signed_digests[name]}"
                 for name in sorted(set(uploaded) & set(signed_digests))
                 if uploaded[name] != signed_digests[name]]
    if problems:
        raise _refuse(f"{FILE} does not match the uploaded files: {'; '.join(problems)}",
                      hint=f"Sign the folder that holds exactly {CONFIG_FILE} and {WEIGHTS_FILE} "
                           "(and README.md, when it is uploaded too), as uploaded, and upload the "
                           "signature made last.")


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"


def _refuse(message: str, hint: str = SIGN_HINT) -> Unprocessable:
    return Unprocessable(message, code=CODE, hint=hint)
