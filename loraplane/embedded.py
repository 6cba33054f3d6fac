"""The embedded default: everything in one folder, no system services."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

console = Console()


def run_embedded(*, data_dir: Path, host: str, port: int) -> None:
    # The embedded default is defined by these; the command's own options win over the environment.
    os.environ["LORAPLANE_DATA_DIR"] = str(data_dir)
    os.environ["LORAPLANE_STORAGE"] = "local"
    public_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    os.environ.setdefault("LORAPLANE_PUBLIC_URL", f"http://{public_host}:{port}")
    import uvicorn

    from loraplane.tokens import bootstrap_admin
    from registry import migrate
    from registry.settings import get_settings

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.database_url)
    token_file = settings.data_dir / "admin.token"
    token = bootstrap_admin()
    if token is not None:
        token_file.touch(mode=0o600)
        token_file.chmod(0o600)  # also when the file was already there
        token_file.write_text(token + "\n")
        console.print(f"[green]created the first admin token[/green], saved to {token_file}")
    console.print(f"registry   http://{host}:{port}   (API docs at /docs)")
    console.print(f"dashboard  http://{public_host}:{port}/ui/   (sign in with a token)")
    console.print(f"state      {settings.data_dir}")
    console.print(f"admin      export LORAPLANE_TOKEN=$(cat {token_file})")
    uvicorn.run("registry.app:create_app", factory=True, host=host, port=port, log_level="info")
