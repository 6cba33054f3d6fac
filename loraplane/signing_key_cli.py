"""`loraplane signing-key ...`: the public keys a tenant's signed uploads (model.sig) must verify
with, and whether its uploads must be signed. Tenant admins and global admins only."""

from __future__ import annotations

from pathlib import Path

import typer

from loraplane.cli_support import call, console, print_json
from loraplane_client.connection import checked, connect

signing_key_app = typer.Typer(
    help="Keys that a tenant's signed uploads (model-signing's model.sig) must verify with.",
    no_args_is_help=True)


@signing_key_app.command("add")
def add(
    tenant: str = typer.Argument(...),
    name: str = typer.Argument(..., help="A name for the key, unique in the tenant."),
    public_key: Path = typer.Option(..., help="The EC public key (P-256, P-384 or P-521) as PEM, "
                                               "e.g. from openssl ec -in key.pem -pubout."),
):
    """Trust a public key for the tenant's signed uploads. Never send the private key."""
    body = {"name": name, "public_key_pem": call(public_key.read_text)}
    with connect() as client:
        key = call(lambda: checked(client.post(f"/v1/tenants/{tenant}/signing-keys", json=body)))
    console.print(f"added signing key {key['name']} to {tenant} (sha256 {key['fingerprint'][:16]}…)")
    print_json(key)


@signing_key_app.command("list")
def list_keys(tenant: str = typer.Argument(...),
              include_revoked: bool = typer.Option(False, "--include-revoked")):
    """The tenant's signing keys, oldest first."""
    with connect() as client:
        print_json(call(lambda: checked(client.get(f"/v1/tenants/{tenant}/signing-keys",
                                                   params={"include_revoked": include_revoked}))))


@signing_key_app.command("revoke")
def revoke(tenant: str = typer.Argument(...), name: str = typer.Argument(...)):
    """Refuse uploads signed by this key from now on. Safe to repeat."""
    with connect() as client:
        key = call(lambda: checked(client.post(f"/v1/tenants/{tenant}/signing-keys/{name}/revoke")))
    console.print(f"signing key {name} of {tenant} is revoked")
    print_json(key)


@signing_key_app.command("require")
def require(tenant: str = typer.Argument(...),
            off: bool = typer.Option(False, "--off", help="Accept unsigned uploads again.")):
    """Refuse every upload of the tenant that is not signed by one of its keys (or, with --off,
    stop refusing them)."""
    with connect() as client:
        policy = call(lambda: checked(client.put(f"/v1/tenants/{tenant}/signing-policy",
                                                 json={"require_signed_uploads": not off})))
    state = "must be signed" if policy["require_signed_uploads"] else "may be unsigned"
    console.print(f"uploads of {tenant} {state} ({policy['active_keys']} active key(s))")
    print_json(policy)
