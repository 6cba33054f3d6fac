"""`loraplane k8s render`: the inference gateway's objects (docs/gateway.md) as YAML, for a GitOps
repository, from the registry's database: the objects the reconciler applies, no cluster needed.
Run where the database is (a registry pod): the active sets are read as the registry signed them."""

from __future__ import annotations

import typer
import yaml

from loraplane.cli_support import call, fail

k8s_app = typer.Typer(help="Kubernetes: the inference gateway's objects (docs/gateway.md).",
                      no_args_is_help=True)


@k8s_app.command("render")
def render(pool: str | None = typer.Option(None, "--pool", help="This pool's objects only (default: every pool's).")):
    """Print every pool's InferencePool, InferenceObjective (one per SLO tier) and
    InferenceModelRewrite (one per client-facing model name) as YAML documents, as
    LORAPLANE_GATEWAY_* configures them (namespace, instance, llm-d group/version, endpoint picker,
    pod labels, port)."""
    from registry.db import plain_transaction
    from registry.gateway import service
    from registry.gateway.objects import GatewaySpec
    from registry.settings import get_settings

    spec = GatewaySpec.from_settings(get_settings())

    def read() -> service.Desired:
        with plain_transaction() as session:
            return service.desired(session, spec, pool)

    desired = call(read)
    if desired.unread:
        # Nothing is printed: a GitOps tool that prunes would delete the objects of a pool left out.
        fail("; ".join(f"pool {name!r}: {why}" for name, why in sorted(desired.unread.items())),
             "Nothing was printed. Run this where the registry runs (its database and attestation "
             "keys), or fix the pool's active set first.")
    typer.echo(yaml.safe_dump_all(desired.objects, sort_keys=False, explicit_start=True), nl=False)
