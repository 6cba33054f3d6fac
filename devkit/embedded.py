"""The embedded default: everything in one folder, no system services."""

from __future__ import annotations

import os
from pathlib import Path

from loraplane_client.terminal import console, fail

# The actor `loraplane token` writes in the audit log: the first admin is an operator's token too.
OPERATOR = "operator (cli)"

# What defines the embedded default; the command's own options win over the environment.
_EMBEDDED = {"LORAPLANE_STORAGE": "local", "LORAPLANE_DATABASE_URL": "", "LORAPLANE_BROKER_URL": "",
             "LORAPLANE_RESULT_BACKEND": ""}


def embedded_environment(data_dir: Path, public_url: str) -> dict[str, str]:
    """The environment of every process of the local stack."""
    return {**os.environ, **_EMBEDDED, "LORAPLANE_DATA_DIR": str(data_dir), "LORAPLANE_PUBLIC_URL": public_url,
            "PYTHONUNBUFFERED": "1"}  # logs arrive as they are written


def prepare_state(data_dir: Path, public_url: str) -> str:
    """Migrate the database and return the admin token, minting the first one into
    data_dir/admin.token (mode 0600) on a fresh folder."""
    os.environ.update(embedded_environment(data_dir, public_url))
    from migrations import runner
    from registry import upgrade_seals
    from registry.db import prepare_folder
    from registry.settings import get_settings

    settings = get_settings()
    prepare_folder(settings.data_dir)  # 0700: it holds the database, the keys and the tokens
    runner.upgrade(settings.database_url)
    pools, canaries = upgrade_seals.seal_in_transaction(actor="loraplane up (schema brought up to date)")
    for pool in pools:
        console.print(f"pool {pool}: active set signed from its rows (made before sets were signed)")
    for promotion_id in canaries:
        console.print(f"canary {promotion_id}: analysis sealed (started before analyses were sealed)")
    _rekey_saved_tokens(settings.data_dir)
    token_file = settings.data_dir / "admin.token"
    token = bootstrap_admin()
    if token is not None:
        token_file.touch(mode=0o600)
        token_file.chmod(0o600)  # also when the file was already there
        token_file.write_text(token + "\n")
        console.print(f"[green]created the first admin token[/green], saved to {token_file}")
    elif not token_file.is_file():
        fail(f"{token_file} is missing, and the database already has an admin",
             f"Mint one: LORAPLANE_DATA_DIR={data_dir} loraplane token create --subject me --role admin "
             f"> {token_file}")
    return token_file.read_text().strip()


def serve_registry(data_dir: Path, host: str, port: int, public_url: str) -> None:
    """The registry and dashboard alone, in this process."""
    import uvicorn

    console.print(f"registry   http://{host}:{port}   (API docs at /docs)")
    console.print(f"dashboard  {public_url}/ui/   (sign in with a token)")
    console.print(f"state      {data_dir}")
    console.print(f"admin      export LORAPLANE_TOKEN=$(cat {data_dir / 'admin.token'})")
    uvicorn.run("loraplane.server:create_app", factory=True, host=host, port=port, log_level="info")


def _rekey_saved_tokens(data_dir: Path) -> None:
    """Tokens this folder saved before token hashes were keyed (its admin token and the demo's):
    stored keyed now, since their secrets are at hand here."""
    import json

    from registry.auth import tokens
    from registry.unit_of_work import transaction

    saved = []
    if (data_dir / "admin.token").is_file():
        saved.append((data_dir / "admin.token").read_text().strip())
    if (data_dir / "demo.json").is_file():
        saved += list(json.loads((data_dir / "demo.json").read_text()).get("tokens", {}).values())
    with transaction() as session:
        for plain in saved:
            tokens.rehashed(session, plain, [(None, tokens.legacy_hash(plain))])


def bootstrap_admin() -> str | None:
    """Create the first global admin token, unless an admin already exists. Safe to rerun."""
    from registry.auth import tokens
    from registry.auth.principal import Role
    from registry.unit_of_work import transaction
    from registry.tokens import issuing

    with transaction() as session:
        if tokens.has_admin(session):
            return None
        _, plain = issuing.create_token(session, subject="bootstrap-admin", role=Role.ADMIN,
                                        tenant=None, actor=OPERATOR)
    return plain
