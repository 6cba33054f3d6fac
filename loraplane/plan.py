"""`loraplane plan`: a pool's sizing (GET /v1/pools/{pool}/sizing) as tables. Each figure keeps
its label, so an assumed number is never read as a measured one."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

SOURCE_STYLE = {"measured": "green", "assumed": "yellow"}
DEPLOYMENT_ROWS = ("replicas", "gpus_per_replica", "gpus", "memory_per_replica", "gpu_memory",
                   "cost_per_1m_tokens")


def render(sizing: dict, console: Console) -> None:
    console.print(f"pool [bold]{sizing['pool']}[/bold]: base {sizing['base_model']}, "
                  f"{sizing['dtype']}")
    slots = sizing["lora_slots"]
    console.print(_figures("LoRA slot memory (each replica)", slots))
    console.print(_figures("active set and max_lora_rank",
                           {**sizing["active_set"], **sizing["rank_waste"]}))
    comparison = sizing["comparison"]
    console.print(_figures("assumptions", comparison["assumptions"]))
    console.print(_deployments(comparison))
    for key in ("base_weights", "weights_budget_per_gpu", "gpu_ratio", "cost_ratio"):
        figure = comparison[key]
        console.print(f"{_label(key)}: {quantity(figure)} {_source(figure['source'])} "
                      f"[dim]{figure['note']}[/dim]")


def quantity(figure: dict) -> str:
    """A figure's value in its unit, readable: bytes in GiB or MiB, money with $, ratios as x."""
    value, unit = figure["value"], figure["unit"]
    if value is None:
        return "-"
    if unit == "bytes":
        return _bytes(value)
    if unit == "USD":
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    if unit == "USD/hour":
        return f"${value:,.2f}/hour"
    if unit == "fraction":
        return f"{value:.0%}" if value * 100 == round(value * 100) else f"{value:.2%}"
    if unit == "ratio":
        return f"{value:,.1f}x"
    if unit == "rank":
        return f"rank {value}"
    return f"{value:,.4g} {unit}" if isinstance(value, float) else f"{value:,} {unit}"


def _bytes(value: int) -> str:
    for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= size:
            return f"{value / size:,.2f} {name}"
    return f"{value} B"


def _figures(title: str, figures: dict) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("figure", "value", "source", "note"):
        table.add_column(column)
    for key, figure in figures.items():
        table.add_row(_label(key), quantity(figure), _source(figure["source"]), figure["note"])
    return table


def _deployments(comparison: dict) -> Table:
    n = comparison["assumptions"]["adapters"]["value"]
    table = Table(title=f"{n} full replicas against multi-LoRA", title_justify="left")
    for column in ("figure", f"{n} full replicas", "multi-LoRA", "source"):
        table.add_column(column)
    full, multi = comparison["full_replicas"], comparison["multi_lora"]
    for key in DEPLOYMENT_ROWS:
        sources = dict.fromkeys((full[key]["source"], multi[key]["source"]))
        table.add_row(_label(key), quantity(full[key]), quantity(multi[key]),
                      " / ".join(_source(s) for s in sources))
    return table


def _label(key: str) -> str:
    return key.replace("_", " ").replace("1m", "1M")


def _source(source: str) -> str:
    return f"[{SOURCE_STYLE.get(source, 'red')}]{source}[/]"
