"""Tenants of their own, EC keys and real model-signing signatures, for the signed-upload tests."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from registry.auth.principal import Role
from registry.tokens import issuing as token_service
from devkit.units_of_work import unit_of_work

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class TenantClients:
    name: str
    admin: httpx.Client
    uploader: httpx.Client


def new_tenant(engine, client_with, prefix: str) -> TenantClients:
    """A tenant no other test touches, so its keys and policy are this test's alone."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    with unit_of_work(engine) as session:
        _, admin = token_service.create_token(session, subject=f"{name}-admin", role=Role.ADMIN,
                                              tenant=name, actor="tests")
        _, uploader = token_service.create_token(session, subject=f"{name}-uploader",
                                                 role=Role.UPLOADER, tenant=name, actor="tests")
    return TenantClients(name, client_with(admin), client_with(uploader))


def new_key(curve: ec.EllipticCurve | None = None) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(curve or ec.SECP256R1())


def public_pem(key) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def private_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def add_key(admin: httpx.Client, tenant: str, name: str, key) -> dict:
    response = admin.post(f"/v1/tenants/{tenant}/signing-keys",
                          json={"name": name, "public_key_pem": public_pem(key)})
    assert response.status_code == 201, response.text
    return response.json()


def sign(files: dict[str, bytes], key, workdir: Path, hashing=None) -> bytes:
    """model.sig for a folder holding exactly `files`, as a team signs with model-signing's key
    signer (by default with its default hashing: whole files, sha256)."""
    import model_signing

    folder = workdir / f"to-sign-{secrets.token_hex(4)}"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    key_file = workdir / f"{folder.name}.key"
    key_file.write_text(private_pem(key))
    signature = workdir / f"{folder.name}.sig"
    config = model_signing.signing.Config().use_elliptic_key_signer(private_key=key_file)
    if hashing is not None:
        config.set_hashing_config(hashing)
    config.sign(folder, signature)
    return signature.read_bytes()


def peft_files(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in PEFT_FILES}


def upload(client: httpx.Client, adapter: str, files: dict[str, bytes]) -> httpx.Response:
    return client.post(f"/v1/adapters/{adapter}/versions",
                       files=[("file", (name, data)) for name, data in files.items()])
