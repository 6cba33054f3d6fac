"""The `loraplane` command line."""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer
from pydantic import ByteSize, TypeAdapter, ValidationError

from loraplane.adapter_cli import adapter_app, version_app
from loraplane.cli_support import call as _call
from loraplane.cli_support import console
from loraplane.cli_support import fail as _fail
from loraplane.cli_support import settings_or_fail
from loraplane.k8s_cli import k8s_app
from loraplane.cli_support import print_json as _print_json
from loraplane.login_cli import login as login_command
from loraplane.login_cli import link_identity as link_identity_command
from loraplane.login_cli import logout as logout_command
from loraplane.policy_cli import policy_app
from loraplane.promotion_cli import audit_app, promotion_app
from loraplane.signing_key_cli import signing_key_app
from loraplane.tenant_cli import tenant_app
from loraplane.verify_cli import verify as verify_command
from loraplane_client import credentials
from loraplane_client.connection import ClientSettings, checked, connect
from registry.names import NAME_PATTERN


class RequalifyChoice(StrEnum):
    """registry/pools/schemas.py's RequalifyPolicy."""
    keep_serving = "keep_serving"
    suspend = "suspend"


class OverflowChoice(StrEnum):
    """registry/pools/schemas.py's Overflow."""
    refuse = "refuse"
    on_demand = "on_demand"


OVERFLOW_HELP = ("What the pool does with more approved adapters than its nodes keep resident: "
                 "refuse the promotion, or on_demand (the most used stay resident, the others load "
                 "at their first request through vLLM's resolver; needs --cold-tier-bytes).")
COLD_TIER_HELP = ("With --overflow on_demand: the disk each node's adapter cache may use, in bytes or "
                  "with a unit (200GiB, 500GB).")


def _byte_count(given: str | None) -> int | None:
    if given is None:
        return None
    try:
        return int(TypeAdapter(ByteSize).validate_python(given.strip()))
    except ValidationError:
        _fail(f"--cold-tier-bytes {given[:40]!r} is not a size", "Give bytes, or a size such as 200GiB or 500GB.")


app = typer.Typer(help="loraplane: validated LoRA adapters for multi-LoRA serving on vLLM.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False,
                  rich_markup_mode="markdown")
db_app = typer.Typer(help="Database migrations (Alembic).", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (run where the registry's database is reachable).",
                        no_args_is_help=True)
base_app = typer.Typer(help="Base models.", no_args_is_help=True)
base_alias_app = typer.Typer(help=(
    "Other names of a base: what adapters' configs may give as base_model_name_or_path."),
    no_args_is_help=True)
base_app.add_typer(base_alias_app, name="alias")
pool_app = typer.Typer(help="Serving pools.", no_args_is_help=True)
suite_app = typer.Typer(help="Eval suites: datasets, metrics and thresholds.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluate adapter versions on a real vLLM.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(promotion_app, name="promotion")
app.add_typer(audit_app, name="audit")
app.add_typer(suite_app, name="suite")
app.add_typer(policy_app, name="policy")
app.add_typer(eval_app, name="eval")
app.add_typer(token_app, name="token")
app.add_typer(base_app, name="base-model")
app.add_typer(pool_app, name="pool")
app.command("verify")(verify_command)
app.command("login")(login_command)
app.command("logout")(logout_command)
app.command("link-identity")(link_identity_command)
app.add_typer(signing_key_app, name="signing-key")
app.add_typer(tenant_app, name="tenant")
app.add_typer(adapter_app, name="adapter")
app.add_typer(version_app, name="version")
app.add_typer(k8s_app, name="k8s")
# --- server side --------------------------------------------------------------------------------


@app.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Address the registry and the router listen on."),
    port: int = typer.Option(8000, help="The registry's and dashboard's port."),
    router_port: int = typer.Option(8090, help="The OpenAI-compatible router's port."),
    data_dir: Path = typer.Option(Path(".loraplane"), help="Where the embedded default keeps its state."),
    registry_only: bool = typer.Option(False, "--registry-only",
                                       help="Run only the registry and dashboard, in this process."),
):
    """Run the whole pipeline on this machine, on the embedded default.

    The registry with its dashboard, an evaluation worker with its own vLLM, a serving vLLM with
    its node agent, and the router: SQLite, a local artifact folder and a folder broker, all in
    DATA_DIR. Seeds a demo tenant, pool and suite, and prints the URLs and tokens. Needs vLLM in
    .venv-vllm and the `models` extra (`./dev up` installs both); without them, or with
    --registry-only, it runs the registry and dashboard alone. Ctrl-C stops everything.
    """
    from devkit.stack.up import UpOptions, run_up

    run_up(UpOptions(data_dir=data_dir.resolve(), host=host, port=port, router_port=router_port,
                     registry_only=registry_only))


@app.command()
def demo(
    data_dir: Path = typer.Option(Path(".loraplane"), help="The data folder of the running `loraplane up`."),
):
    """Tell the whole story against a running `loraplane up`, step by step.

    Pushes three adapters (two good, one broken), waits for their evaluations on vLLM, approves
    and promotes the good ones, queries them through the router with the openai client, and shows
    that the broken one was blocked, and why. Prints a JSON summary; exits 1 if anything did not
    go as the story says.
    """
    from devkit.demo import run_demo

    summary = _call(lambda: run_demo(data_dir.resolve()))
    _print_json(summary)
    if not summary["passed"]:
        raise typer.Exit(1)


@app.command()
def serve(
    host: str = typer.Option("0.0.0.0", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(1, min=1, help="Worker processes (the registry keeps no state)."),
    access_log: bool = typer.Option(True, help="Log every request (a large node fleet may not want "
                                               "a line per long-poll)."),
    shutdown_grace_s: float | None = typer.Option(
        None, min=0, help="On SIGTERM, cut off requests still running after this long (parked "
                          "long-polls are answered at once). Default: wait for them all."),
):
    """Run the registry with the settings in LORAPLANE_* variables (production).

    Creates LORAPLANE_DATA_DIR (mode 0700) if needed. On SQLite, the single-machine default, it
    also brings the schema up to date; on PostgreSQL run `loraplane db upgrade` first.
    """
    import uvicorn

    from migrations import runner
    from registry.db import prepare_folder
    from registry.settings import get_settings

    settings = get_settings()
    _call(lambda: prepare_folder(settings.data_dir))  # uploads spool there, whatever the database
    if settings.database_url.startswith("sqlite"):
        _call(lambda: runner.upgrade(settings.database_url))
        _seal_active_sets(None, "loraplane serve (schema brought up to date)")
    if workers > 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _fresh_metrics_folder(settings.data_dir)
    uvicorn.run("loraplane.server:create_app", factory=True, host=host, port=port, workers=workers,
                proxy_headers=True, access_log=access_log,
                # uvicorn waits with asyncio's float timeout; its annotation says int.
                timeout_graceful_shutdown=shutdown_grace_s)  # type: ignore[arg-type]


def _fresh_metrics_folder(data_dir: Path) -> None:
    """Several worker processes share the port: each writes its metrics to a file there, and a
    scrape reads them all. Emptied at each start, so a past run's processes are not counted."""
    folder = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or data_dir / "metrics")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    others = [path.name for path in folder.iterdir() if path.suffix != ".db"]
    if others:
        _fail(f"PROMETHEUS_MULTIPROC_DIR {folder} holds files that are not metrics ({', '.join(others[:3])})",
              "Point it at a folder of its own: serve empties it at each start.")
    for stale in folder.glob("*.db"):
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)  # the worker processes inherit it


MetricsPort = Annotated[int | None, typer.Option(
    min=0, max=65535, envvar="LORAPLANE_METRICS_PORT",
    help="Serve /metrics on this port, for a metrics token (loraplane token create --role "
         "metrics). Default: no metrics endpoint.")]
MetricsHost = Annotated[str, typer.Option(envvar="LORAPLANE_METRICS_HOST",
                                          help="The address /metrics listens on.")]


def _serve_metrics(host: str, port: int | None) -> None:
    if port is not None:
        from workers import metrics_endpoint

        _call(lambda: metrics_endpoint.serve(host, port))


@app.command()
def worker(
    loglevel: str = typer.Option("info", help="Celery log level."),
    hostname: str = typer.Option("", help="Worker name (default: eval@<host>)."),
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "0.0.0.0",
):
    """Run an evaluation worker for the eval engine in LORAPLANE_ENGINE_* variables.

    It consumes the queue of the engine's base model, one batch at a time.
    """
    from registry.task_queue import evaluation_queue
    from workers.app import app as celery_app
    from workers.settings import get_worker_settings

    _require_the_registrys_keys("worker")
    _serve_metrics(metrics_host, metrics_port)

    queue = evaluation_queue(get_worker_settings().engine_base_model)
    argv = ["worker", "-Q", queue, "--pool=solo", "--concurrency=1", f"--loglevel={loglevel}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    celery_app.worker_main(argv)


@app.command()
def housekeeper(
    loglevel: str = typer.Option("info", help="Celery log level."),
    concurrency: int = typer.Option(4, min=1, max=64, help="Deliveries in flight."),
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "0.0.0.0",
):
    """Run the housekeeping worker: webhook deliveries with retries, and canary analysis every
    LORAPLANE_CANARY_CHECK_S. Needs no engine."""
    from registry.task_queue import HOUSEKEEPING_QUEUE
    from workers.housekeeping import app as celery_app

    _require_the_registrys_keys("housekeeper")
    _serve_metrics(metrics_host, metrics_port)

    celery_app.worker_main(["worker", "-Q", HOUSEKEEPING_QUEUE, "--pool=threads",
                            f"--concurrency={concurrency}", f"--loglevel={loglevel}",
                            "--hostname=housekeeping@%h"])


def _require_the_registrys_keys(process: str) -> None:
    """A worker or housekeeper seals audit events and signs: with the registry's keys only."""
    from registry.db import plain_transaction
    from registry.deployment_keys import service as deployment_keys

    def check() -> None:
        with plain_transaction() as session:
            deployment_keys.require_the_registrys(session, process)

    _call(check)


@app.command()
def agent(
    pool: str = typer.Option(..., help="The pool this node serves."),
    vllm_url: str = typer.Option("http://127.0.0.1:8000", help="This node's vLLM (keep it private)."),
    registry: str = typer.Option(..., help="The registry's URL."),
    node_id: str | None = typer.Option(None, help="This node's name in the pool (default: host name)."),
    trust_bundle: Path | None = typer.Option(None, exists=True, dir_okay=False, readable=True, help=(
        "A pinned copy of the registry's /.well-known/loraplane/trust-bundle.json: trust only its "
        "keys (default: pin the registry's first answer, then take rotations it signs).")),
    engine_dtype: str | None = typer.Option(None, help="vLLM's --dtype, reported with its version."),
):
    """Run the node agent: make this node's vLLM serve exactly the pool's active set, each version
    proven by its signed attestation and re-hashed before every load.

    The node token comes from LORAPLANE_AGENT_NODE_TOKEN, never from the command line; on
    Kubernetes, LORAPLANE_AGENT_TOKEN_FILE names the pod's projected service-account token instead,
    and the pod's name is the node id. Other settings (state dir, cache size, metrics port) are
    LORAPLANE_AGENT_* variables.
    """
    from serving.agent.main import run
    from serving.agent.settings import AgentSettings

    overrides: dict[str, Any] = {"pool": pool, "vllm_url": vllm_url, "registry_url": registry}
    for name, value in (("node_id", node_id), ("trust_bundle", trust_bundle), ("engine_dtype", engine_dtype)):
        if value:
            overrides[name] = value
    run(settings_or_fail(lambda: AgentSettings(**overrides), "LORAPLANE_AGENT_", "node_token",
                         "Set LORAPLANE_AGENT_NODE_TOKEN (loraplane token create --role node --pool POOL), "
                         "or LORAPLANE_AGENT_TOKEN_FILE on Kubernetes."))


@app.command()
def router(
    pool: str = typer.Option(..., help="The pool to route for."),
    registry: str = typer.Option(..., help="The registry's URL."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8090, help="Port of the OpenAI-compatible API."),
):
    """Run the OpenAI-compatible router for a pool.

    Applications call it with an app key and model="tenant/name", "tenant/name:alias" or
    "tenant/name@N". The router's own token (role router) comes from LORAPLANE_ROUTER_TOKEN, never
    from the command line. Other settings (tiers, timeouts, metrics port) are LORAPLANE_ROUTER_*
    variables.
    """
    from serving.router.main import run
    from serving.router.settings import RouterSettings

    run(settings_or_fail(lambda: RouterSettings(pool=pool, registry_url=registry, host=host, port=port),
                         "LORAPLANE_ROUTER_", "token",
                         "Set LORAPLANE_ROUTER_TOKEN (loraplane token create --role router --pool POOL)."))


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head")):
    """Apply migrations up to REVISION (default: head)."""
    from migrations import runner
    from registry.settings import get_settings

    _call(lambda: runner.upgrade(get_settings().database_url, revision))
    typer.echo(f"database at {revision}")
    if revision == "head":
        _seal_active_sets(None, "loraplane db upgrade")


@db_app.command("seal-active-sets")
def db_seal_active_sets(
    pool: str | None = typer.Option(None, help="Sign this pool's rows as its active set, even "
                                                  "where a signed set exists; check them first."),
):
    """Sign, from their rows, the active sets of pools that have none (made before active sets
    were signed), or of --pool after you have checked its rows. Run on the registry host: it
    needs the attestation key. Every seal is audited."""
    _seal_active_sets(pool, "loraplane db seal-active-sets")


def _seal_active_sets(pool: str | None, actor: str) -> None:
    from registry import upgrade_seals

    _require_the_registrys_keys(actor)  # it seals audit events and signs sets
    pools, canaries = _call(lambda: upgrade_seals.seal_in_transaction(actor=actor, pool_name=pool))
    for name in pools:
        typer.echo(f"pool {name}: active set signed from its rows")
    for promotion_id in canaries:
        typer.echo(f"canary {promotion_id}: analysis policy and state sealed")


@db_app.command("downgrade")
def db_downgrade(revision: str = typer.Argument(..., help="Target revision, e.g. base.")):
    """Revert migrations down to REVISION."""
    from migrations import runner
    from registry.settings import get_settings

    runner.downgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("check")
def db_check():
    """Fail if the tables in code differ from what the migrations build."""
    from migrations import runner
    from registry.settings import get_settings

    runner.check(get_settings().database_url)
    typer.echo("no drift")


@token_app.command("create")
def token_create(
    subject: str = typer.Option(..., help="The person or service the token is for."),
    role: str = typer.Option(..., help="admin, uploader, reviewer, node, router, app (an "
                                        "application's key for the router) or metrics (a "
                                        "scraper's: reads /metrics of every process, nothing else)."),
    tenant: str | None = typer.Option(None, help="Tenant scope; omit for a global admin, a node, "
                                                    "a router or a metrics token."),
    pool: str | None = typer.Option(None, help="The pool of a node or router token."),
    tier: str | None = typer.Option(None, help="An app key's SLO tier: interactive (default) or "
                                                  "batch."),
    instance_id: str | None = typer.Option(
        None, "--instance-id", help="A node token's node id, or a router token's router id: the one "
                                    "node or router it may speak for (required for both)."),
    vllm_url: str | None = typer.Option(
        None, "--vllm-url", help="A node token's vLLM address as routers reach it, such as "
                                 "https://node-1.internal:8000: routers send prompts only there. "
                                 "Required for a node's first token; later ones keep it."),
    identity_id: int | None = typer.Option(
        None, "--identity-id", help="Issue another token to this existing identity (same tenant), "
                                    "e.g. a person's second device; default: a new identity."),
    ttl_days: int | None = typer.Option(
        None, "--ttl-days", help="Lifetime in days (default LORAPLANE_TOKEN_TTL_DAYS, 90)."),
):
    """Create a token in the registry's database (LORAPLANE_DATA_DIR or LORAPLANE_DATABASE_URL,
    said on stderr). It is printed once; only its hash is stored."""
    from loraplane import operator_database
    from loraplane.tokens import create_token

    database = _call(operator_database.checked)
    plain = _call(lambda: create_token(subject=subject, role=role, tenant=tenant, pool=pool, tier=tier,
                                       instance_id=instance_id, identity_id=identity_id,
                                       ttl_days=ttl_days, vllm_url=vllm_url))
    typer.echo(f"made the {role} token of {subject} in {database}", err=True)
    typer.echo(plain)


@token_app.command("list")
def token_list(
    tenant: str | None = typer.Option(None, help="Only this tenant's tokens."),
    include_revoked: bool = typer.Option(False, "--include-revoked", help="Show revoked ones too."),
):
    """List tokens with their identity, issuer, scope and expiry (never their secrets)."""
    from rich.console import Console
    from rich.table import Table

    from loraplane import operator_database
    from loraplane.tokens import list_tokens

    database = _call(operator_database.checked)
    rows = _call(lambda: list_tokens(tenant=tenant, include_revoked=include_revoked))
    typer.echo(f"tokens in {database}", err=True)
    table = Table("id", "subject", "identity", "role", "scope", "issued by", "expires", "revoked")
    for row in rows:
        scope = (f"pool {row['pool']}/{row['instance_id']}" if row["pool"] else row["tenant"] or "*")
        table.add_row(str(row["id"]), row["subject"], f"{row['identity_name']} ({row['identity_id']})",
                      row["role"], scope, str(row["issued_by_token_id"] or "operator"),
                      (row["expires_at"] or "never")[:10], (row["revoked_at"] or "")[:10])
    Console().print(table)


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="The token's id."),
                 with_issued: bool = typer.Option(False, "--with-issued", help=(
                     "Also revoke every token it issued, and theirs (e.g. a departed admin's)."))):
    """Revoke a token at once."""
    from loraplane import operator_database
    from loraplane.tokens import revoke_token

    database = _call(operator_database.checked)
    _call(lambda: revoke_token(token_id, with_issued=with_issued))
    typer.echo(f"in {database}:", err=True)
    typer.echo(f"token {token_id} revoked" + (", with every token it issued" if with_issued else ""))


# --- client side --------------------------------------------------------------------------------


@app.command()
def push(
    source: Path = typer.Argument(..., help=(
        "A PEFT adapter folder (its model-signing model.sig goes too), or a .tar.gz/.zip of one.")),
    adapter: str = typer.Option(..., help="tenant/name to upload to."),
    base_model: str | None = typer.Option(None, help="Target base (default: from the config)."),
    fold_scaling: bool = typer.Option(False, "--fold-scaling", help=(
        "Serve a derived copy with rank_pattern/alpha_pattern folded into lora_B, for engines that "
        "apply one lora_alpha/r to every module; the upload is kept as its provenance.")),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Upload a new adapter version. Identical bytes return the existing version."""
    from loraplane_client.push import push as push_adapter

    tenant, _, name = adapter.partition("/")
    if not (NAME_PATTERN.fullmatch(tenant) and NAME_PATTERN.fullmatch(name)):
        _fail(f"--adapter must look like tenant/name, got {adapter!r}",
              "Each part: lowercase letters, digits, '-' and '_', starting and ending with a letter "
              "or digit.")
    with connect() as client:
        version, created = _call(lambda: push_adapter(client, source, tenant, name,
                                                      base_model=base_model, fold_scaling=fold_scaling,
                                                      show_progress=not quiet))
    console.print(f"{'created' if created else 'already uploaded as'} {version['served_name']} "
                  f"(rank {version['rank']}, sha256 {version['digest'][:12]}…)")
    if version.get("derived_from"):
        console.print(f"serves the scaling folded into lora_B; the upload is kept as sha256 "
                      f"{version['derived_from']['digest'][:12]}…")
    _print_json(version)


@base_app.command("register")
def base_model_register(
    name: str = typer.Argument(..., help="Name to register the base under."),
    config: Path = typer.Option(..., help="The model's Hugging Face config.json."),
    alias: Annotated[list[str] | None, typer.Option(help="Other names adapters may use.")] = None,
):
    """Register a base model from its config.json."""
    body = {"name": name, "config": _call(lambda: json.loads(config.read_text())), "aliases": alias or []}
    with connect() as client:
        _print_json(_call(lambda: checked(client.post("/v1/base-models", json=body))))


@base_alias_app.command("add")
def base_model_alias_add(
    name: str = typer.Argument(..., help="The registered base's name."),
    alias: str = typer.Argument(..., help=(
        "Another name adapters' adapter_config.json may give as base_model_name_or_path, such as "
        "a hub id or the path they were trained from (1-200 printable characters).")),
):
    """Let adapters name a base by another name too (global admins). Refused (409) when the name
    is already another base's name or alias."""
    with connect() as client:
        base = _call(lambda: checked(client.post(f"/v1/base-models/{_path(name)}/aliases", json={"alias": alias})))
    console.print(f"base model {base['name']} is also known as {alias!r}")
    _print_json(_without_modules(base))


@base_alias_app.command("remove")
def base_model_alias_remove(
    name: str = typer.Argument(..., help="The registered base's name."),
    alias: str = typer.Argument(..., help="The alias to drop."),
):
    """Stop accepting an alias in uploads (global admins). Versions uploaded under it keep their
    base."""
    with connect() as client:
        base = _call(lambda: checked(client.delete(f"/v1/base-models/{_path(name)}/aliases/{_path(alias)}")))
    console.print(f"base model {base['name']} is no longer known as {alias!r}")
    _print_json(_without_modules(base))


def _path(text: str) -> str:
    """A base's name or alias as one piece of a URL path. Every '/' is escaped too (the registry
    decodes them back), so that nothing in it (?, #, %, a '..' segment that a client would
    resolve into another endpoint's path) is read as part of the URL."""
    return quote(text, safe="")


def _without_modules(base: dict) -> dict:
    """A base as the alias commands print it: its module table is long, and did not change."""
    return {key: value for key, value in base.items() if key != "modules"}


@pool_app.command("create")
def pool_create(
    name: str = typer.Argument(...),
    base_model: str = typer.Option(..., help="Registered base model name."),
    max_loras: int = typer.Option(4, help="vLLM --max-loras."),
    max_cpu_loras: int = typer.Option(8, help="vLLM --max-cpu-loras."),
    max_lora_rank: int = typer.Option(16, help="vLLM --max-lora-rank (1, 8, 16, 32, 64, ...)."),
    dtype: str = typer.Option("bfloat16", help="float16, bfloat16 or float32."),
    required_suites: Annotated[list[str] | None, typer.Option(
        "--required-suites", help=(
            "Global eval suites for the pool's base that every version must pass before it is "
            "promoted here (repeatable, or comma-separated; at most 32). Give at least one with "
            "the 'parity' metric: the parity gate blocks every promotion until an evaluation "
            "measured it."))] = None,
    requalify_policy: RequalifyChoice = typer.Option(
        RequalifyChoice.keep_serving, "--requalify-policy", help=(
            "What a version does after the pool's engine or base config changed, until it "
            "passes the required suites again: keep_serving, or suspend (it leaves the active "
            "set).")),
    canary_min_routers: int = typer.Option(
        2, min=1, max=16, help="Routers that must each reach a canary's verdict before it acts; 1 "
                               "lets a single router token decide."),
    overflow: OverflowChoice = typer.Option(OverflowChoice.refuse, "--overflow", help=OVERFLOW_HELP),
    cold_tier_bytes: str | None = typer.Option(None, "--cold-tier-bytes", help=COLD_TIER_HELP),
):
    """Create a serving pool."""
    body = {"name": name, "base_model": base_model, "max_loras": max_loras,
            "max_cpu_loras": max_cpu_loras, "max_lora_rank": max_lora_rank, "dtype": dtype,
            "required_suites": _suite_names(required_suites or []),
            "requalify_policy": requalify_policy.value, "canary_min_routers": canary_min_routers,
            "overflow": overflow.value}
    if cold_tier_bytes is not None:
        body["cold_tier_bytes"] = _byte_count(cold_tier_bytes)
    with connect() as client:
        pool = _call(lambda: checked(client.post("/v1/pools", json=body)))
    if not pool["required_suites"]:
        console.print(f"pool {name} requires no suite: a promotion passes the parity gate only "
                      "after an evaluation with the 'parity' metric (`loraplane pool update "
                      f"{name} --required-suites SUITE`)")
    _print_json(pool)


@pool_app.command("update")
def pool_update(
    name: str = typer.Argument(...),
    required_suites: Annotated[list[str] | None, typer.Option(
        "--required-suites", help=(
            "Replace the pool's required suites (repeatable, or comma-separated; 'none' for "
            "none). A suite added is queued at once for every version the pool serves."))] = None,
    requalify_policy: RequalifyChoice | None = typer.Option(
        None, "--requalify-policy", help="keep_serving, or suspend (see `pool create --help`)."),
    canary_min_routers: int | None = typer.Option(
        None, min=1, max=16, help="Routers that must each reach a canary's verdict before it acts."),
    overflow: OverflowChoice | None = typer.Option(None, "--overflow", help=OVERFLOW_HELP + (
        " Only to a setting the active set fits.")),
    cold_tier_bytes: str | None = typer.Option(None, "--cold-tier-bytes", help=COLD_TIER_HELP),
):
    """Change a live pool's required suites, re-qualification policy, canary quorum, overflow or
    cold tier (global admins); what is not given stays as it is."""
    body: dict[str, Any] = {}
    if required_suites is not None:
        body["required_suites"] = [] if required_suites == ["none"] else _suite_names(required_suites)
    if requalify_policy is not None:
        body["requalify_policy"] = requalify_policy.value
    if canary_min_routers is not None:
        body["canary_min_routers"] = canary_min_routers
    if overflow is not None:
        body["overflow"] = overflow.value
    if cold_tier_bytes is not None:
        body["cold_tier_bytes"] = _byte_count(cold_tier_bytes)
    if not body:
        _fail("give --required-suites, --requalify-policy, --canary-min-routers, --overflow or --cold-tier-bytes",
              f"e.g. loraplane pool update {name} --required-suites parity-smoke")
    with connect() as client:
        _print_json(_call(lambda: checked(client.patch(f"/v1/pools/{name}", json=body))))


def _suite_names(given: list[str]) -> list[str]:
    """Suite names from repeated or comma-separated options, checked as the API checks them."""
    names = [part.strip() for item in given for part in item.split(",")]
    if any(not part or len(part) > 200 for part in names):
        _fail(f"--required-suites {','.join(given)!r} holds an empty or over-long name",
              "Name each suite once, e.g. --required-suites parity-smoke,regression")
    repeated = sorted({part for part in names if names.count(part) > 1})
    if repeated:
        _fail(f"--required-suites names {', '.join(map(repr, repeated))} more than once",
              "Name each suite once.")
    if len(names) > 32:
        _fail(f"--required-suites names {len(names)} suites; a pool requires at most 32")
    return names


@app.command()
def plan(
    pool: str = typer.Argument(..., help="The pool to size."),
    gpu_hour_usd: float | None = typer.Option(None, help="Price of one GPU hour (default 2.50)."),
    gpu_memory_gib: float | None = typer.Option(None, help="Memory of one GPU (default 80)."),
    tokens_per_s: float | None = typer.Option(
        None, help="Throughput of one GPU replica of the base (default 2500)."),
    lora_throughput_penalty: float | None = typer.Option(
        None, help="Throughput lost to multi-LoRA kernels (default 0.10)."),
    demand_tokens_per_s: float | None = typer.Option(
        None, help="Total demand across adapters (default: --tokens-per-s)."),
    weights_fraction: float | None = typer.Option(
        None, help="Share of a GPU's memory for the weights; the rest is KV cache (default 0.5)."),
    adapters: int | None = typer.Option(
        None, help="Adapters to serve (default: the pool's active set)."),
    as_json: bool = typer.Option(False, "--json", help="Print the registry's JSON instead of tables."),
):
    """Size POOL: LoRA slot memory, what an oversized max_lora_rank wastes, and multi-LoRA
    against one full replica per adapter. Every figure says whether it is measured or assumed."""
    from rich.console import Console

    from loraplane.plan import render

    assumptions = {"gpu_hour_usd": gpu_hour_usd, "gpu_memory_gib": gpu_memory_gib,
                   "tokens_per_s": tokens_per_s, "lora_throughput_penalty": lora_throughput_penalty,
                   "demand_tokens_per_s": demand_tokens_per_s, "weights_fraction": weights_fraction,
                   "adapters": adapters}
    params = {name: value for name, value in assumptions.items() if value is not None}
    with connect() as client:
        sizing = _call(lambda: checked(client.get(f"/v1/pools/{pool}/sizing", params=params)))
    if as_json:
        _print_json(sizing)
    else:
        render(sizing, Console())


@app.command()
def whoami():
    """Show who the configured token (LORAPLANE_TOKEN, else `loraplane login`'s) belongs to."""
    settings = ClientSettings()
    if settings.token is None and credentials.saved_token(settings.url) is None:
        _fail(f"LORAPLANE_TOKEN is not set, and no unexpired `loraplane login` is kept for {settings.url}",
              "export LORAPLANE_TOKEN=<token>, or run `loraplane login`.")
    with connect(settings) as client:
        _print_json(_call(lambda: checked(client.get("/v1/whoami"))))


if __name__ == "__main__":  # pragma: no cover
    app()




@suite_app.command("create")
def suite_create(
    name: str = typer.Argument(..., help="Suite name."),
    base_model: str = typer.Option(..., help="The base model the suite is for."),
    dataset: Path = typer.Option(..., exists=True, dir_okay=False,
                                 help='JSONL file, one {"prompt": ..., "reference": ...} per line.'),
    metrics: str = typer.Option(
        '{"exact_match": {"min": 0.8}, "reference_loglik": {"min_margin": 0.5}, "parity": {}}',
        help="Metrics and thresholds, as JSON (see GET /docs, SuiteMetrics)."),
    max_tokens: int = typer.Option(32, min=1, max=512, help="Tokens generated per prompt."),
    stop: list[str] = typer.Option([], help="Stop string (repeatable)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help=(
        "Always generate --max-tokens, past the end-of-sequence token (for load tests).")),
    tenant: str | None = typer.Option(None, help=(
        "Make it this tenant's suite, named TENANT/NAME, seen and used by that tenant only (its "
        "admins and uploaders create it). Default: a global suite (global admin).")),
):
    """Create an eval suite: a global one, or a tenant's own with --tenant."""
    from loraplane.evaluate import read_dataset

    rows = _call(lambda: read_dataset(dataset))
    try:
        metric_spec = json.loads(metrics)
    except json.JSONDecodeError as error:
        _fail(f"--metrics is not JSON: {error.msg}", 'For example: \'{"exact_match": {"min": 0.8}}\'')
    body = {"name": name, "base_model": base_model, "examples": rows, "metrics": metric_spec,
            "generation": {"max_tokens": max_tokens, "stop": stop, "ignore_eos": ignore_eos},
            **({"tenant": tenant} if tenant else {})}
    with connect() as client:
        _print_json(_call(lambda: checked(client.post("/v1/eval-suites", json=body))))


@eval_app.command("run")
def eval_run(
    version: str = typer.Argument(..., help="The version, as tenant/name@N."),
    suite: str = typer.Option(..., help="The eval suite."),
    against: int | None = typer.Option(None, min=1, help=(
        "Also evaluate version N of the same adapter (the incumbent) in the same batch, and show "
        "the two side by side.")),
    again: bool = typer.Option(False, "--again", help=(
        "Evaluate anew even if an evaluation passed: after a pool's engine changed, its gates "
        "count only evaluations that ran on that engine.")),
    wait: bool = typer.Option(True, help="Wait for the verdict, showing progress."),
    timeout_s: float = typer.Option(3600, help="How long to wait."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Request an evaluation. Exits 0 when it passed, 1 when it failed."""
    from loraplane import evaluate

    with connect() as client:
        evaluation = _call(lambda: evaluate.request(client, version, suite, against=against, again=again))
        console.print(f"evaluation {evaluation['id']}: {evaluation['state']}")
        if not wait:
            _print_json(evaluation)
            return
        evaluation = _call(lambda: evaluate.watch(client, evaluation, console=console,
                                                  timeout_s=timeout_s, show_progress=not quiet))
        incumbent = None
        if evaluation.get("pair"):
            other = {"id": evaluation["pair"]["other_evaluation_id"], "state": "queued", "attempts": 1,
                     "served_name": evaluation["pair"]["other_served_name"], "suite": suite, "reason": None}
            incumbent = _call(lambda: evaluate.watch(client, other, console=console, timeout_s=timeout_s,
                                                     show_progress=not quiet))
    evaluate.render(evaluation, console)
    if incumbent is not None:
        evaluate.render_pair(evaluation, incumbent, console)
    _print_json({k: v for k, v in evaluation.items() if k != "examples"})
    if evaluation["state"] != "passed":
        raise typer.Exit(1)


@eval_app.command("show")
def eval_show(
    evaluation_id: int = typer.Argument(..., min=1, help="The evaluation's id."),
    examples: int = typer.Option(0, min=0, max=200, help="Also print this many per-example results."),
    examples_cursor: str | None = typer.Option(None, help=(
        "With --examples: print the results after this cursor, the examples.next_cursor of the "
        "page before.")),
):
    """Show an evaluation's verdict, metrics and engine."""
    from loraplane import evaluate

    params: dict[str, Any] = {"examples_limit": max(examples, 1)}
    if examples_cursor:
        params["examples_cursor"] = examples_cursor
    with connect() as client:
        evaluation = _call(lambda: checked(client.get(f"/v1/evaluations/{evaluation_id}", params=params)))
    evaluate.render(evaluation, console)
    if not examples:
        evaluation.pop("examples", None)
    _print_json(evaluation)
