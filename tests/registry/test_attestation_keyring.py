"""Where the attestation keys live: a folder (generated, rotated with overlap), one key from the
environment (never rotated by the API), or a plug-in; and never two of them at once."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.attestation_keys import environment, keyring, published
from registry.attestation_keys.folder import FolderKeyring
from registry.settings import RegistrySettings

pytestmark = pytest.mark.fast


def pem(private) -> str:
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()


def test_a_key_folder_generates_its_key_and_rotates_with_an_overlap(tmp_path):
    folder = FolderKeyring(tmp_path / "keys")
    first = folder.signing_key_id()
    assert stat.S_IMODE((tmp_path / "keys" / f"{first}.pem").stat().st_mode) == 0o600
    assert folder.held()[0] == 1

    second = folder.rotate(timedelta(hours=2))

    version, held = folder.held()
    ends = {key.key_id: key.not_after for key in held}
    assert (version, folder.signing_key_id(), ends[second]) == (2, second, None)
    assert timedelta(hours=1, minutes=59) < ends[first] - datetime.now(UTC) <= timedelta(hours=2)
    message = b"statement"
    public = {key.key_id: key.public_key for key in held}
    _public(public[first]).verify(folder.sign(first, message), message)  # signs through its overlap
    assert FolderKeyring(tmp_path / "keys").signing_key_id() == second  # another process agrees


def test_a_retired_keys_private_half_is_destroyed_once_its_trust_ends(tmp_path):
    import time

    folder = FolderKeyring(tmp_path / "keys")
    first = folder.signing_key_id()
    second = folder.rotate(timedelta(seconds=1))
    assert (tmp_path / "keys" / f"{first}.pem").exists()
    time.sleep(1.1)

    _, held = folder.held()

    assert not (tmp_path / "keys" / f"{first}.pem").exists()
    assert {key.key_id for key in held} == {first, second}  # its public half still recognises it
    assert [key.announced_at(datetime.now(UTC)) for key in held if key.key_id == first] == [False]
    with pytest.raises(FileNotFoundError):
        folder.sign(first, b"anything")


def test_an_emergency_rotation_ends_trust_at_once_and_announces_it(tmp_path):
    folder = FolderKeyring(tmp_path / "keys")
    first = folder.signing_key_id()
    folder.rotate(timedelta(0))

    retired = {key.key_id: key for key in folder.held()[1]}[first]

    assert retired.emergency and retired.not_after <= datetime.now(UTC)
    assert retired.announced_at(datetime.now(UTC))  # named, with its end, for the notice period
    assert not retired.announced_at(datetime.now(UTC) + published.EMERGENCY_NOTICE)
    assert (tmp_path / "keys" / f"{first}.pem").exists()  # it signs that announcement


def _public(raw: bytes):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(raw)


# (attestation_key_dir=None below: the test session names a key folder for all its processes.)


def test_a_key_from_the_environment_signs_and_is_never_rotated_by_the_api():
    private = Ed25519PrivateKey.generate()
    single = keyring._build(RegistrySettings(attestation_private_key=pem(private), attestation_key_dir=None))

    assert isinstance(single, environment.EnvironmentKeyring)
    assert single.held() == (1, [published.PublishedKey(
        single.signing_key_id(), private.public_key().public_bytes_raw(), None)])
    with pytest.raises(published.RotationUnsupported, match="LORAPLANE_ATTESTATION_PRIVATE_KEY"):
        single.rotate(timedelta(days=1))


def test_a_key_from_the_environment_must_be_ed25519():
    with pytest.raises(ValueError, match="must be an Ed25519 private key"):
        keyring._build(RegistrySettings(
            attestation_private_key=pem(ec.generate_private_key(ec.SECP256R1())), attestation_key_dir=None))


def test_a_plug_in_is_loaded_by_its_module_and_factory(tmp_path):
    built = keyring._build(RegistrySettings(attestation_keyring=f"{__name__}:plug_in", attestation_key_dir=None))
    assert isinstance(built, FolderKeyring) and built.folder.name == "plugged"


def plug_in() -> FolderKeyring:  # any object with the Keyring methods will do
    import tempfile
    from pathlib import Path

    return FolderKeyring(Path(tempfile.mkdtemp()) / "plugged")


def test_two_sources_of_keys_at_once_are_refused(tmp_path):
    with pytest.raises(ValueError, match="set one of LORAPLANE_ATTESTATION_PRIVATE_KEY, "
                                         "LORAPLANE_ATTESTATION_KEY_DIR, not several"):
        keyring._build(RegistrySettings(attestation_private_key=pem(Ed25519PrivateKey.generate()),
                                        attestation_key_dir=tmp_path))


def test_previous_keys_from_the_environment_are_held_but_not_announced_until_the_ledger_says():
    current, old = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    built = keyring._build(RegistrySettings(attestation_private_key=pem(current),
                                            attestation_previous_private_keys=pem(old), attestation_key_dir=None))
    version, held = built.held()
    assert version == 1 and [key.key_id for key in held] == [built.signing_key_id(), built.previous_key_ids()[0]]
    assert not held[1].announced_at(datetime.now(UTC))  # no ledger adopted: its trust is not extended


def test_previous_keys_without_a_current_one_or_without_a_key_are_refused_naming_the_setting(tmp_path):
    with pytest.raises(ValueError, match="LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS is set without "
                                         "LORAPLANE_ATTESTATION_PRIVATE_KEY"):
        keyring._build(RegistrySettings(attestation_previous_private_keys=pem(Ed25519PrivateKey.generate()),
                                        attestation_key_dir=tmp_path))
    with pytest.raises(ValueError, match="holds no PKCS#8 PEM private key"):
        keyring._build(RegistrySettings(attestation_private_key=pem(Ed25519PrivateKey.generate()),
                                        attestation_previous_private_keys="not a key", attestation_key_dir=None))
