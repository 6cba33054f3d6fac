"""Start real servers as plain processes on loopback, in temporary folders.

Used by the test suite and the benchmarks: PostgreSQL, Redis, an S3 server (moto_server), the
registry, workers, node agents, routers and vLLM. Each handle stops its process, and its folder
is removed by its owner.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_fixed

from devkit import engine

VENV_BIN = Path(sys.executable).parent
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                  "AWS_DEFAULT_REGION": "us-east-1"}


def remove_tree(path: Path) -> None:
    """rmtree that also removes the agent's sealed cache folders (0555), as any user."""
    for folder, _, _ in os.walk(path):
        try:
            os.chmod(folder, 0o755)
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Service:
    process: subprocess.Popen
    url: str
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the process; one started in a session of its own (vLLM, workers, agents) is
        stopped with everything it started."""
        if self.process.poll() is None and _leads_group(self.process.pid):
            stop_group(self)
        elif self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def wait_until(check, *, timeout_s: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not become ready in {timeout_s}s\n{tail}")


def wait_for(check, *, timeout_s: float = 30, what: str = "condition"):
    """check()'s first true value; a check that never comes true fails the run's assertion."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
        except (httpx.HTTPError, OSError):
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# --- PostgreSQL ---------------------------------------------------------------------------------


def _postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    return found[-1]


def _as_postgres(args: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root, so drop to its own user when we are root.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def start_postgres(folder: Path) -> Service:
    data, sockets, log = folder / "data", folder / "sockets", folder / "postgres.log"
    folder.mkdir(parents=True, exist_ok=True)
    sockets.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
    subprocess.run(
        _as_postgres([_postgres_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                      "--no-sync", "-E", "UTF8"]),
        check=True, capture_output=True,
    )
    port = free_port()
    process = subprocess.Popen(
        _as_postgres([_postgres_bin("postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
                      "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                      "-c", "full_page_writes=off", "-c", "max_connections=200"]),
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    service = Service(process, url, log)
    wait_until(lambda: _pg_ready(port), timeout_s=30, what="PostgreSQL", log=log)
    return service


def _pg_ready(port: int) -> bool:
    result = subprocess.run([_postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                            capture_output=True)
    return result.returncode == 0


def create_database(server_url: str, name: str, template: str | None = None) -> str:
    """A new, empty database `name` (any of that name is dropped first), or a copy of the
    database `template`, which nothing may be connected to meanwhile."""
    import psycopg

    # A process that just stopped may hold its session a moment longer: the copy waits for it.
    @retry(retry=retry_if_exception_type(psycopg.errors.ObjectInUse), wait=wait_fixed(0.1),
           stop=stop_after_delay(10), reraise=True)
    def create(conn: psycopg.Connection) -> None:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))

    with psycopg.connect(server_url.replace("+psycopg", "") + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        create(conn)
    return f"{server_url}/{name}"


def start_pgbouncer(folder: Path, postgres_url: str, *, pool_size: int = 40) -> Service:
    """PgBouncer in transaction-pooling mode in front of `postgres_url`'s server, every database
    passed through. Returns its URL in the same form (postgresql+psycopg://postgres@host:port),
    so create_database's URLs point through it once the host and port are swapped."""
    from sqlalchemy import make_url

    server = make_url(postgres_url)
    folder.mkdir(parents=True, exist_ok=True)
    port, log = free_port(), folder / "pgbouncer.log"
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(f"""[databases]
* = host={server.host} port={server.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 20000
ignore_startup_parameters = extra_float_digits,options
logfile = {log}
""")
    if os.geteuid() == 0:  # it refuses to run as root, as PostgreSQL does
        shutil.chown(folder, "postgres")
        for name in ("userlist.txt", "pgbouncer.ini"):
            shutil.chown(folder / name, "postgres")
    process = subprocess.Popen(_as_postgres(["pgbouncer", str(folder / "pgbouncer.ini")]),
                               stdout=(folder / "stdout.log").open("wb"), stderr=subprocess.STDOUT)
    service = Service(process, f"{server.drivername}://{server.username}@127.0.0.1:{port}", log)
    wait_until(lambda: _pg_ready(port), timeout_s=20, what="PgBouncer", log=folder / "stdout.log")
    return service


# --- an OpenID Connect provider ----------------------------------------------------------------


def start_oidc_provider(folder: Path, *args: str) -> Service:
    """A real OpenID provider process (oidc-provider-mock): discovery, keys, the authorization
    form and the token endpoint. Its issuer is the returned URL; PUT /users/{sub} sets a person's
    claims (groups, say)."""
    folder.mkdir(parents=True, exist_ok=True)
    port, log = free_port(), folder / "oidc-provider.log"
    process = subprocess.Popen([str(VENV_BIN / "oidc-provider-mock"), "--host", "127.0.0.1",
                                "--port", str(port), *args],
                               stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    service = Service(process, url, log)
    wait_until(lambda: httpx.get(url + "/.well-known/openid-configuration").status_code == 200,
               timeout_s=30, what="the OpenID provider", log=log)
    return service


# --- S3 -----------------------------------------------------------------------------------------


def start_s3(folder: Path, port: int | None = None) -> Service:
    folder.mkdir(parents=True, exist_ok=True)
    port, log = port or free_port(), folder / "moto.log"
    env = {**os.environ, **S3_CREDENTIALS}
    process = subprocess.Popen([str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    service = Service(process, url, log, env=S3_CREDENTIALS)
    wait_until(lambda: httpx.get(url + "/moto-api/").status_code < 500, timeout_s=30, what="moto_server",
               log=log)
    return service


def s3_client(endpoint_url: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


# --- registry -----------------------------------------------------------------------------------


def start_registry(folder: Path, env: dict[str, str | None], *args: str, port: int | None = None) -> Service:
    """Run the registry as its own process, exactly as `loraplane serve` does. A variable set to
    None in `env` is left out."""
    folder.mkdir(parents=True, exist_ok=True)
    port, log = port or free_port(), folder / "registry.log"
    url = f"http://127.0.0.1:{port}"
    full_env = {name: value for name, value in {
        **os.environ, **S3_CREDENTIALS, "LORAPLANE_DATA_DIR": str(folder), "LORAPLANE_PUBLIC_URL": url,
        **env}.items() if value is not None}
    process = subprocess.Popen(
        [str(VENV_BIN / "loraplane"), "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=full_env,
    )
    service = Service(process, url, log, env=full_env)

    def answers() -> bool:
        if process.poll() is not None:  # it refused to start: say why at once
            raise RuntimeError(f"the registry exited with {process.returncode}\n{log.read_text()[-3000:]}")
        return httpx.get(url + "/healthz").status_code == 200

    wait_until(answers, timeout_s=60, what="registry", log=log)
    return service


# --- redis, vLLM and workers --------------------------------------------------------------------


def start_redis(folder: Path) -> Service:
    folder.mkdir(parents=True, exist_ok=True)
    port, log = free_port(), folder / "redis.log"
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
         "--save", "", "--appendonly", "no"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    service = Service(process, f"redis://127.0.0.1:{port}/0", log)

    def ready() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    wait_until(ready, timeout_s=20, what="redis-server", log=log)
    return service


def start_vllm(folder: Path, spec, env: dict[str, str] | None = None) -> Service:
    """A real vLLM OpenAI server on CPU (devkit.engine builds the command); `env` adds to its
    environment (a plugin's settings, say)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "vllm.log"
    process = subprocess.Popen(engine.command(spec), stdout=log.open("wb"), stderr=subprocess.STDOUT,
                               env={**engine.environment(spec, folder / "cache"), **(env or {})}, cwd=folder,
                               start_new_session=True)
    url = f"http://{spec.host}:{spec.port}"
    service = Service(process, url, log)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {process.returncode}\n{log.read_text()[-3000:]}")
        return httpx.get(url + "/health", timeout=2).status_code == 200

    wait_until(ready, timeout_s=240, what="vLLM", log=log)
    return service


def kit_engine(kit, served_name: str, **settings):
    """An engine spec for the task kit's base on a free loopback port. Unless `settings` say
    otherwise, it is configured like a node of a kit pool: two adapters in a batch, eight kept
    resident, ranks up to 16."""
    limits = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}
    return engine.EngineSpec(model_dir=kit.base_dir, served_name=served_name, port=free_port(),
                             **{**limits, **settings})


def stop_group(service: Service, sig: int = 15) -> None:
    """Stop a process and everything it started (vLLM's engine core, a worker's children)."""
    if service.process.poll() is None:
        try:
            os.killpg(service.process.pid, sig)
        except ProcessLookupError:
            return
        try:
            service.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(service.process.pid, 9)
            service.process.wait()


def start_worker(folder: Path, env: dict[str, str], name: str = "eval", *,
                 inherit_settings: bool = True) -> Service:
    """An evaluation worker, exactly as `loraplane worker` runs it. `inherit_settings=False`: with
    none of this process's LORAPLANE_* settings, as `loraplane up` starts one beside its registry
    (the data folder holds the rest)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name}.log"
    start = log.stat().st_size if log.exists() else 0  # a restart appends to the same log
    inherited = {k: v for k, v in os.environ.items() if inherit_settings or not k.startswith("LORAPLANE_")}
    full_env = {**inherited, **S3_CREDENTIALS, "LORAPLANE_DATA_DIR": str(folder), **env}
    process = subprocess.Popen(
        [str(VENV_BIN / "loraplane"), "worker", "--hostname", f"{name}@%h"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    service = Service(process, "", log, env=full_env)
    wait_until(lambda: b"ready." in log.read_bytes()[start:], timeout_s=60, what="worker", log=log)
    return service


def start_housekeeper(folder: Path, env: dict[str, str]) -> Service:
    """The housekeeping worker (webhook deliveries), exactly as `loraplane housekeeper` runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "housekeeper.log"
    start = log.stat().st_size if log.exists() else 0
    full_env = {**os.environ, **S3_CREDENTIALS, "LORAPLANE_DATA_DIR": str(folder), **env}
    process = subprocess.Popen([str(VENV_BIN / "loraplane"), "housekeeper"], stdout=log.open("ab"),
                               stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    service = Service(process, "", log, env=full_env)
    wait_until(lambda: b"ready." in log.read_bytes()[start:], timeout_s=60, what="housekeeper", log=log)
    return service


def start_agent(folder: Path, *, pool: str, vllm_url: str, registry_url: str, token: str,
                node_id: str, metrics_port: int, resync_s: float = 0.5,
                settings: dict[str, str] | None = None) -> Service:
    """A node agent, exactly as `loraplane agent` runs it; its token comes from the environment,
    and `settings` (LORAPLANE_AGENT_* variables) override the defaults below."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "agent.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORAPLANE_")}
    env.update({"LORAPLANE_AGENT_NODE_TOKEN": token, "LORAPLANE_AGENT_STATE_DIR": str(folder / "state"),
                "LORAPLANE_AGENT_METRICS_PORT": str(metrics_port), "LORAPLANE_AGENT_RESYNC_S": str(resync_s),
                "LORAPLANE_AGENT_POLL_WAIT_S": "10", "LORAPLANE_AGENT_BACKOFF_MAX_S": "1",
                "LORAPLANE_AGENT_RETRY_FAILED_AFTER_S": "600",
                # Well under the test registry's LORAPLANE_NODE_STALE_AFTER_S of 3.
                "LORAPLANE_AGENT_HEARTBEAT_S": "1", **(settings or {})})
    process = subprocess.Popen(
        [str(VENV_BIN / "loraplane"), "agent", "--pool", pool, "--vllm-url", vllm_url,
         "--registry", registry_url, "--node-id", node_id],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    service = Service(process, f"http://127.0.0.1:{metrics_port}", log, env=env)
    wait_until(lambda: httpx.get(service.url + "/metrics").status_code == 200, timeout_s=30,
               what="agent", log=log)
    return service


def start_database_and_store(work: Path, running: list[Service], bucket: str) -> tuple[str, Service]:
    """PostgreSQL with a migrated database and an S3 server with a bucket, as the benchmarks run
    them; both are appended to `running` for the caller to stop. Returns (database URL, S3)."""
    from migrations import runner

    # The benchmark process approves through the registry's own service, so it must sign and key
    # the audit chain with what the registry processes use: the same secret and attestation keys.
    os.environ.setdefault("LORAPLANE_SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.setdefault("LORAPLANE_ATTESTATION_KEY_DIR", str(work / "attestation-keys"))
    from registry.settings import get_settings

    get_settings.cache_clear()  # read before these were set, by a module imported earlier
    postgres = start_postgres(work / "postgres")
    running.append(postgres)
    database_url = create_database(postgres.url, "bench")
    runner.upgrade(database_url)
    s3 = start_s3(work / "s3")
    running.append(s3)
    s3_client(s3.url).create_bucket(Bucket=bucket)
    return database_url, s3


def registry_env(database_url: str, s3: Service, bucket: str) -> dict[str, str]:
    """A registry on that database and bucket."""
    return {"LORAPLANE_DATABASE_URL": database_url, "LORAPLANE_STORAGE": "s3",
            "LORAPLANE_S3_ENDPOINT_URL": s3.url, "LORAPLANE_S3_BUCKET": bucket}


def start_router(folder: Path, *, pool: str, registry_url: str, token: str,
                 settings: dict[str, str] | None = None) -> Service:
    """The router, exactly as `loraplane router` runs it; its token comes from the environment.
    Service.url is the OpenAI API; env["METRICS_URL"] its /metrics."""
    folder.mkdir(parents=True, exist_ok=True)
    log, port, metrics_port = folder / "router.log", free_port(), free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORAPLANE_")}
    env.update({"LORAPLANE_ROUTER_TOKEN": token, "LORAPLANE_ROUTER_METRICS_PORT": str(metrics_port),
                **(settings or {})})
    process = subprocess.Popen(
        [str(VENV_BIN / "loraplane"), "router", "--pool", pool, "--registry", registry_url,
         "--port", str(port)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    service = Service(process, f"http://127.0.0.1:{port}", log,
                      env={**env, "METRICS_URL": f"http://127.0.0.1:{metrics_port}/metrics"})
    wait_until(lambda: httpx.get(service.url + "/healthz").status_code == 200, timeout_s=30,
               what="router", log=log)
    return service
