"""Which LORAPLANE_* variables each process of the chart reads: the fields of its settings class
(pydantic-settings ignores any other name, so a misspelt one would be dropped silently) and the
options of its `loraplane` command that read a variable."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import typer.main
from pydantic_settings import BaseSettings

from loraplane.cli import app
from registry.settings import RegistrySettings
from serving.agent.settings import AgentSettings
from serving.router.settings import RouterSettings
from workers.settings import WorkerSettings

# The chart's container -> its settings class and its command.
PROCESSES: dict[str, tuple[type[BaseSettings], tuple[str, ...]]] = {
    "registry": (RegistrySettings, ("serve",)),
    "migrate": (RegistrySettings, ("db", "upgrade")),
    "worker": (WorkerSettings, ("worker",)),
    "housekeeper": (RegistrySettings, ("housekeeper",)),
    "agent": (AgentSettings, ("agent",)),
    "router": (RouterSettings, ("router",)),
}


def settings_variables(settings: type[BaseSettings]) -> set[str]:
    prefix = settings.model_config.get("env_prefix", "")
    names = set()
    for field_name, field in settings.model_fields.items():
        names.add(f"{prefix}{field_name}".upper())
        if isinstance(field.validation_alias, str):
            names.add(field.validation_alias.upper())
    return names


def command_variables(path: tuple[str, ...]) -> set[str]:
    command = typer.main.get_command(app)
    for part in path:
        command = command.commands[part]  # type: ignore[attr-defined]
    names = set()
    for parameter in command.params:
        envvar = getattr(parameter, "envvar", None)
        names.update([envvar] if isinstance(envvar, str) else envvar or [])
    return names


# What loraplane's resolver plugin reads inside vLLM's process. It is installed into vLLM's
# environment, not this one: imported from the checkout (it imports vLLM only to register).
PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "vllm-resolver"
if str(PLUGIN) not in sys.path:
    sys.path.insert(0, str(PLUGIN))
_plugin = importlib.import_module("loraplane_vllm_resolver")
RESOLVER_PLUGIN_VARIABLES = {_plugin.SOCKET_ENV, _plugin.DEADLINE_ENV}


def variables_of(container_name: str) -> set[str]:
    settings, command = PROCESSES[container_name]
    return settings_variables(settings) | command_variables(command)
