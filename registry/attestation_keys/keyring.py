"""The keys that sign attestations, wherever they live: a folder (the default, rotated through the
API; folder.py), keys from the environment (rotated by deploying another; environment.py), or a
plug-in (a KMS, say) that implements `Keyring` (published.py)."""

from __future__ import annotations

import importlib

from registry.attestation_keys.environment import EnvironmentKeyring
from registry.attestation_keys.folder import FolderKeyring
from registry.attestation_keys.published import Keyring
from registry.settings import RegistrySettings, get_settings


_built: tuple[int, Keyring] | None = None


def get_keyring() -> Keyring:
    """The deployment's keyring, built once per settings object."""
    global _built
    settings = get_settings()
    if _built is None or _built[0] != id(settings):
        _built = (id(settings), _build(settings))
    return _built[1]


def _build(settings: RegistrySettings) -> Keyring:
    chosen = [name for name, value in (("LORAPLANE_ATTESTATION_KEYRING", settings.attestation_keyring),
                                       ("LORAPLANE_ATTESTATION_PRIVATE_KEY", settings.attestation_private_key),
                                       ("LORAPLANE_ATTESTATION_KEY_DIR", settings.attestation_key_dir))
              if value is not None]
    if settings.attestation_previous_private_keys is not None and settings.attestation_private_key is None:
        raise ValueError("LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS is set without "
                         "LORAPLANE_ATTESTATION_PRIVATE_KEY: previous keys are those the key from "
                         "the environment replaced")
    if len(chosen) > 1:  # one deployment, one source of keys: never a silent precedence
        raise ValueError(f"set one of {', '.join(chosen)}, not several: each names where the "
                         "attestation keys live")
    if settings.attestation_keyring:
        module, factory = settings.attestation_keyring.split(":")
        return getattr(importlib.import_module(module), factory)()
    if settings.attestation_private_key is not None:
        previous = settings.attestation_previous_private_keys
        return EnvironmentKeyring(settings.attestation_private_key.get_secret_value().encode(),
                                  previous.get_secret_value().encode() if previous else b"")
    return FolderKeyring(settings.attestation_key_dir or settings.data_dir / "attestation-keys")
