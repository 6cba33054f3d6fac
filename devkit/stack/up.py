"""`loraplane up`: the whole pipeline on one machine, on the embedded default.

The registry with its dashboard, an evaluation worker with its own vLLM, the housekeeper
(webhooks, canary analysis), a serving vLLM with its node agent, and the router, all keeping
their state in one data folder: SQLite, a local artifact
folder, and a folder broker that needs no server. The demo's tenant, pool, suite and tokens are
seeded, the URLs and tokens printed, and Ctrl-C stops everything.
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import typer
from rich.markup import escape

from devkit import engine
from devkit.embedded import embedded_environment, prepare_state, serve_registry
from devkit.stack import seed
from devkit.stack.supervisor import ProcessSpec, Supervisor, http_ok
from loraplane_client.terminal import console, fail

# The eval engine batches up to this many versions; the node's limits are the pool's.
EVAL_LIMITS = {"max_loras": 4, "max_cpu_loras": 8, "max_lora_rank": 16}
VLLM_READY_S = 300  # a cold start of two engines on two cores


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    host: str
    port: int
    router_port: int
    registry_only: bool = False


def run_up(options: UpOptions) -> None:
    options.data_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(options.data_dir)
    try:
        _run_locked(options)
    finally:
        lock.close()


def _run_locked(options: UpOptions) -> None:
    for port, option in ((options.port, "--port"), (options.router_port, "--router-port")):
        _require_free(options.host, port, option)
    public_url = f"http://{_public_host(options.host)}:{options.port}"
    admin_token = prepare_state(options.data_dir, public_url)
    missing = [] if options.registry_only else _missing_for_pipeline()
    if options.registry_only or missing:
        for what in missing:
            console.print(f"[yellow]{escape(what)}[/yellow]")
        if missing:
            console.print("[yellow]Running the registry and dashboard only; `./dev up` installs both.[/yellow]")
        serve_registry(options.data_dir, options.host, options.port, public_url)
        return
    _Stack(options, public_url, admin_token).run()


class _Stack:
    def __init__(self, options: UpOptions, public_url: str, admin_token: str) -> None:
        self.options, self.public_url, self.admin_token = options, public_url, admin_token
        self.data_dir = options.data_dir
        self.router_url = f"http://{_public_host(options.host)}:{options.router_port}"
        self.supervisor = Supervisor(self.data_dir / "logs")
        self.env = embedded_environment(self.data_dir, public_url)
        self.scratch: list[Path] = []  # vLLM's socket folders, removed at the end

    def run(self) -> None:
        started = time.monotonic()
        # Also SIGINT: a shell starting `up` in the background leaves SIGINT ignored.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            setup = self._start()
            _print_summary(setup, self, time.monotonic() - started)
            while True:
                self.supervisor.check()
                time.sleep(0.5)
        except KeyboardInterrupt:
            console.print("\nstopping everything ...")
        except (RuntimeError, httpx.HTTPError) as error:  # StartFailed is a RuntimeError
            console.print(f"[red]error:[/red] {escape(str(error))}")
            raise typer.Exit(1) from None
        finally:
            self.supervisor.stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for folder in self.scratch:
                shutil.rmtree(folder, ignore_errors=True)
        console.print("stopped; the state stays in "
                      f"{self.data_dir} and the next `loraplane up` reuses it")

    def _start(self) -> seed.DemoSetup:
        sup = self.supervisor
        sup.start(self._registry())
        with _step("the tiny base model and task adapters"):
            kit = _build_kit(self.data_dir / "task-kit", sup.log_path("task-kit"))
        eval_url = self._start_vllm("eval-vllm", kit, EVAL_LIMITS)
        node_url = self._start_vllm("node-vllm", kit, seed.POOL_LIMITS)
        with _step(f"the registry at {self.public_url}"):
            sup.wait_ready("registry")
        with _step(f"the demo tenant {seed.TENANT!r}, pool {seed.POOL!r} and suite {seed.SUITE!r}"):
            setup = self._seed(kit, node_url)
        sup.start(self._worker(eval_url))
        sup.start(self._housekeeper())
        with _step("vLLM on CPU for evaluations and for serving, a worker and the housekeeper"):
            sup.wait_ready("eval-vllm", "node-vllm", "worker", "housekeeper")
        sup.start(self._agent(node_url, setup.tokens["node"]))
        sup.start(self._router(setup.tokens["router"]))
        with _step(f"the node agent and the router at {self.router_url}"):
            sup.wait_ready("agent", "router")
        return setup

    def _seed(self, kit, node_url: str) -> seed.DemoSetup:
        path = self.data_dir / "demo.json"
        saved = seed.DemoSetup.load(path) if path.exists() else None
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        with httpx.Client(base_url=self.public_url, headers=headers, timeout=60) as registry:
            setup = seed.seed(registry, kit, saved, registry_url=self.public_url,
                              router_url=self.router_url, node_url=node_url)
        setup.save(path)
        return setup

    def _registry(self) -> ProcessSpec:
        argv = [sys.executable, "-m", "loraplane", "serve", "--host", self.options.host,
                "--port", str(self.options.port), "--no-access-log", "--shutdown-grace-s", "3"]
        return ProcessSpec("registry", argv, self.env, http_ok(self.public_url + "/healthz"))

    def _start_vllm(self, name: str, kit, limits: dict) -> str:
        spec = engine.EngineSpec(model_dir=kit.base_dir, served_name=seed.BASE_MODEL, port=_free_port(),
                                 max_loras=limits["max_loras"], max_cpu_loras=limits["max_cpu_loras"],
                                 max_lora_rank=limits["max_lora_rank"])
        folder = self.data_dir / "vllm" / name
        folder.mkdir(parents=True, exist_ok=True)
        # Socket paths have a 108-byte limit that a deep data folder would break.
        self.scratch.append(Path(tempfile.mkdtemp(prefix=f"loraplane-{name}-")))
        env = engine.environment(spec, folder / "cache", sockets_dir=self.scratch[-1])
        url = f"http://{spec.host}:{spec.port}"
        self.supervisor.start(ProcessSpec(name, engine.command(spec), env, http_ok(url + "/health"),
                                          VLLM_READY_S, cwd=folder))
        return url

    def _worker(self, eval_url: str) -> ProcessSpec:
        env = {**self.env, "LORAPLANE_ENGINE_URL": eval_url, "LORAPLANE_ENGINE_BASE_MODEL": seed.BASE_MODEL,
               "LORAPLANE_ENGINE_MAX_LORAS": str(EVAL_LIMITS["max_loras"]),
               "LORAPLANE_ENGINE_MAX_LORA_RANK": str(EVAL_LIMITS["max_lora_rank"])}
        argv = [sys.executable, "-m", "loraplane", "worker", "--hostname", "eval@%h"]
        return ProcessSpec("worker", argv, env, lambda: b"ready." in self.supervisor.log_since_start("worker"))

    def _housekeeper(self) -> ProcessSpec:
        """Webhook deliveries, and canary analysis: judged every second here, beside the router's
        traffic reports, also every second, so that a demo canary decides within its window (its
        grace covers one report and the router's active-set delay)."""
        env = {**self.env, "LORAPLANE_CANARY_CHECK_S": "1", "LORAPLANE_CANARY_GRACE_S": "2"}
        argv = [sys.executable, "-m", "loraplane", "housekeeper"]
        return ProcessSpec("housekeeper", argv, env,
                           lambda: b"ready." in self.supervisor.log_since_start("housekeeper"))

    def _agent(self, node_url: str, token: str) -> ProcessSpec:
        metrics_port = _free_port()
        env = {**self.env, "LORAPLANE_AGENT_NODE_TOKEN": token,
               "LORAPLANE_AGENT_STATE_DIR": str(self.data_dir / "agent"),
               "LORAPLANE_AGENT_METRICS_PORT": str(metrics_port)}
        argv = [sys.executable, "-m", "loraplane", "agent", "--pool", seed.POOL, "--vllm-url", node_url,
                "--registry", self.public_url, "--node-id", seed.NODE_ID]
        return ProcessSpec("agent", argv, env, http_ok(f"http://127.0.0.1:{metrics_port}/healthz"))

    def _router(self, token: str) -> ProcessSpec:
        env = {**self.env, "LORAPLANE_ROUTER_TOKEN": token, "LORAPLANE_ROUTER_ROUTER_ID": seed.ROUTER_ID,
               "LORAPLANE_ROUTER_METRICS_PORT": str(_free_port()), "LORAPLANE_ROUTER_TRAFFIC_REPORT_S": "1"}
        argv = [sys.executable, "-m", "loraplane", "router", "--pool", seed.POOL, "--registry", self.public_url,
                "--host", self.options.host, "--port", str(self.options.router_port)]
        return ProcessSpec("router", argv, env, http_ok(self.router_url + "/healthz"))


def _build_kit(root: Path, log: Path):
    """The task kit: reused when built, else trained in a process of its own (torch's memory
    goes with it)."""
    from devkit.task_kit import build_task_kit

    if not (root / "task_kit.json").is_file():
        with log.open("ab") as out:
            built = subprocess.run([sys.executable, "-m", "devkit.task_kit", str(root),
                                    "--base-model-name", seed.BASE_MODEL], stdout=out, stderr=subprocess.STDOUT)
        if built.returncode != 0:
            raise RuntimeError(f"building the task kit failed (code {built.returncode}); see {log}")
    return build_task_kit(root, base_model_name=seed.BASE_MODEL)


def _print_summary(setup: seed.DemoSetup, stack: _Stack, seconds: float) -> None:
    tokens, data_dir = setup.tokens, stack.data_dir
    lines = [
        f"\n[green]loraplane is up[/green] in {seconds:.0f} s\n",
        f"  dashboard   {stack.public_url}/ui/  (sign in with the reviewer's token)",
        f"  registry    {stack.public_url}  (API docs at /docs)",
        f"  router      {stack.router_url}/v1  (OpenAI-compatible, model=\"{seed.TENANT}/NAME\")",
        f"  logs        {data_dir / 'logs'}/\n",
        f"tokens, also in {data_dir / 'demo.json'} and {data_dir / 'admin.token'} (mode 0600):",
        f"  admin       {stack.admin_token}",
        f"  reviewer    {tokens['reviewer']}  (tenant {seed.TENANT})",
        f"  uploader    {tokens['uploader']}  (ml-engineer, tenant {seed.TENANT})",
        f"  app key     {tokens['app']}  (for the router, tenant {seed.TENANT})\n",
        "next: [bold]loraplane demo[/bold] in another shell (after `source .venv/bin/activate`). "
        "Ctrl-C here stops everything.",
    ]
    for line in lines:
        console.print(line, soft_wrap=True)  # a token cut in two cannot be copied


@contextmanager
def _step(what: str) -> Iterator[None]:
    started = time.monotonic()
    with console.status(f"starting {what} ..."):
        yield
    console.print(f"[green]✓[/green] {what} ({time.monotonic() - started:.1f} s)")


def _missing_for_pipeline() -> list[str]:
    missing = []
    if not engine.vllm_python().exists():
        missing.append(f"vLLM is not installed at {engine.vllm_python()} (set LORAPLANE_VLLM_PYTHON).")
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("peft") is None:
        missing.append("torch and peft are not installed (pip install 'loraplane[models]').")
    return missing


def _lock(data_dir: Path):
    file = (data_dir / "up.lock").open("a+")
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fail(f"another `loraplane up` is running on {data_dir}",
             "Stop it first (Ctrl-C in its shell), or pass another --data-dir.")
    return file


def _require_free(host: str, port: int, option: str) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is fine
        try:
            sock.bind((host, port))
        except OSError:
            fail(f"port {port} on {host} is in use", f"Stop what uses it, or pass {option} with a free port.")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _public_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host


def _interrupt(*_) -> None:
    raise KeyboardInterrupt

