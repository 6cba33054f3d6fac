"""The `loraplane` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from loraplane.client import ClientSettings, RegistryError, checked, connect
from registry.errors import LoraplaneError
from registry.names import NAME_PATTERN

app = typer.Typer(help="loraplane: validated LoRA adapters for multi-LoRA serving on vLLM.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)
db_app = typer.Typer(help="Database migrations (Alembic).", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (run where the registry's database is reachable).",
                        no_args_is_help=True)
base_app = typer.Typer(help="Base models.", no_args_is_help=True)
pool_app = typer.Typer(help="Serving pools.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(base_app, name="base-model")
app.add_typer(pool_app, name="pool")
console = Console(stderr=True)


def _fail(message: str, hint: str = "") -> None:
    console.print(f"[red]error:[/red] {message}")
    if hint:
        console.print(f"[yellow]hint:[/yellow] {hint}")
    raise typer.Exit(1)


def _call(request):
    try:
        return request()
    except RegistryError as error:
        _fail(f"{error.message} ({error.code}, HTTP {error.status})", error.hint)
    except LoraplaneError as error:
        _fail(error.message, error.hint)
    except (OSError, ValueError) as error:
        _fail(str(error))


def _print_json(value) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


# --- server side --------------------------------------------------------------------------------


@app.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    data_dir: Path = typer.Option(Path(".loraplane"), help="Where the embedded default keeps its state."),
):
    """Run the registry on the embedded default: SQLite and a local artifact folder."""
    from loraplane.embedded import run_embedded

    run_embedded(data_dir=data_dir.resolve(), host=host, port=port)


@app.command()
def serve(
    host: str = typer.Option("0.0.0.0", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(1, min=1, help="Worker processes (the registry keeps no state)."),
):
    """Run the registry with the settings in LORAPLANE_* variables (production)."""
    import uvicorn

    uvicorn.run("registry.app:create_app", factory=True, host=host, port=port, workers=workers,
                proxy_headers=True)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head")):
    """Apply migrations up to REVISION (default: head)."""
    from registry import migrate
    from registry.settings import get_settings

    migrate.upgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: str = typer.Argument(..., help="Target revision, e.g. base.")):
    """Revert migrations down to REVISION."""
    from registry import migrate
    from registry.settings import get_settings

    migrate.downgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("check")
def db_check():
    """Fail if the tables in code differ from what the migrations build."""
    from registry import migrate
    from registry.settings import get_settings

    migrate.check(get_settings().database_url)
    typer.echo("no drift")


@token_app.command("create")
def token_create(
    subject: str = typer.Option(..., help="The person or service the token is for."),
    role: str = typer.Option(..., help="admin, uploader, reviewer or node."),
    tenant: Optional[str] = typer.Option(None, help="Tenant scope; omit only for a global admin."),
):
    """Create a token. It is printed once; only its hash is stored."""
    from loraplane.tokens import create_token

    _call(lambda: typer.echo(create_token(subject=subject, role=role, tenant=tenant)))


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="The token's id.")):
    """Revoke a token at once."""
    from loraplane.tokens import revoke_token

    _call(lambda: revoke_token(token_id))
    typer.echo(f"token {token_id} revoked")


# --- client side --------------------------------------------------------------------------------


@app.command()
def push(
    source: Path = typer.Argument(..., help="A PEFT adapter folder, or a .tar.gz/.zip of one."),
    adapter: str = typer.Option(..., help="tenant/name to upload to."),
    base_model: Optional[str] = typer.Option(None, help="Target base (default: from the config)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Upload a new adapter version. Identical bytes return the existing version."""
    from loraplane.push import push as push_adapter

    tenant, _, name = adapter.partition("/")
    if not (NAME_PATTERN.fullmatch(tenant) and NAME_PATTERN.fullmatch(name)):
        _fail(f"--adapter must look like tenant/name, got {adapter!r}",
              "Each part: lowercase letters, digits, '-' and '_', starting and ending with a letter "
              "or digit.")
    with connect() as client:
        version, created = _call(lambda: push_adapter(client, source, tenant, name,
                                                      base_model=base_model, show_progress=not quiet))
    console.print(f"{'created' if created else 'already uploaded as'} {version['served_name']} "
                  f"(rank {version['rank']}, sha256 {version['digest'][:12]}…)")
    _print_json(version)


@base_app.command("register")
def base_model_register(
    name: str = typer.Argument(..., help="Name to register the base under."),
    config: Path = typer.Option(..., help="The model's Hugging Face config.json."),
    alias: Annotated[Optional[list[str]], typer.Option(help="Other names adapters may use.")] = None,
):
    """Register a base model from its config.json."""
    body = {"name": name, "config": _call(lambda: json.loads(config.read_text())), "aliases": alias or []}
    with connect() as client:
        _print_json(_call(lambda: checked(client.post("/v1/base-models", json=body))))


@pool_app.command("create")
def pool_create(
    name: str = typer.Argument(...),
    base_model: str = typer.Option(..., help="Registered base model name."),
    max_loras: int = typer.Option(4, help="vLLM --max-loras."),
    max_cpu_loras: int = typer.Option(8, help="vLLM --max-cpu-loras."),
    max_lora_rank: int = typer.Option(16, help="vLLM --max-lora-rank (1, 8, 16, 32, 64, ...)."),
    dtype: str = typer.Option("bfloat16", help="float16, bfloat16 or float32."),
):
    """Create a serving pool."""
    body = {"name": name, "base_model": base_model, "max_loras": max_loras,
            "max_cpu_loras": max_cpu_loras, "max_lora_rank": max_lora_rank, "dtype": dtype}
    with connect() as client:
        _print_json(_call(lambda: checked(client.post("/v1/pools", json=body))))


@app.command()
def whoami():
    """Show who the configured token (LORAPLANE_TOKEN) belongs to."""
    settings = ClientSettings()
    if settings.token is None:
        _fail("LORAPLANE_TOKEN is not set", "export LORAPLANE_TOKEN=<token>")
    with connect(settings) as client:
        _print_json(_call(lambda: checked(client.get("/v1/whoami"))))


if __name__ == "__main__":  # pragma: no cover
    app()


