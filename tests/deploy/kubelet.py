"""What a cluster does with the chart's pods, done with local processes: each container's exact
command, args and env, run from the local virtual environments instead of its image; each pod on
a loopback address of its own (127.x.y.z, as a pod's IP), so every port stays the one the chart
names; volumes as folders; Services' DNS names resolved to the address of the pod they select;
Secrets and ConfigMaps the test's. Probes are asked exactly as the manifest says.

The translation is deliberately narrow: a path is rewritten only under a mount of the container,
an address only where it is the pod's own (0.0.0.0, or 127.0.0.1 on a port of its containers) or
a Service's name (the external services, on this host's 127.0.0.1, are left alone). Anything the
chart gets wrong (a flag, a variable, a port, a probe's path) reaches the process unchanged."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devkit import services
from tests.deploy.chart import ROOT
from tests.deploy.settings_names import PROCESSES, variables_of

TEARDOWN_GRACE_S = 5

VENVS = {"loraplane": ROOT / ".venv" / "bin", "vllm": ROOT / ".venv-vllm" / "bin"}
# What an image's entry point is here: the loraplane images hold the `loraplane` command, the
# vLLM images `python3` with vLLM installed.
COMMANDS = {"loraplane": VENVS["loraplane"] / "loraplane", "python3": VENVS["vllm"] / "python"}


def subnet() -> str:
    """A /24 of loopback for one test's pods, away from 127.0.0.0/24 that every other test uses."""
    return f"127.{random.randint(100, 250)}.{random.randint(1, 250)}"


@dataclass
class Cluster:
    root: Path
    namespace: str
    items: list[dict[str, Any]]
    secrets: dict[str, dict[str, str]]
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    # volume sources that are not emptyDirs, projected tokens or ConfigMaps: a claim or a host
    # path, by the volume's name in the pod
    volumes: dict[str, Path] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    _subnet: str = field(default_factory=subnet)

    def pod(self, workload: dict[str, Any], name: str) -> Pod:
        address = f"{self._subnet}.{len(self.pods) + 1}"
        created = Pod(self, name, workload, address, self.root / f"p{len(self.pods)}")
        self.pods[name] = created
        return created

    def resolve(self, host: str) -> str | None:
        """A Service's DNS name, short or long, to the address of a pod it selects."""
        for service in (i for i in self.items if i["kind"] == "Service"):
            service_name = service["metadata"]["name"]
            names = {service_name, f"{service_name}.{self.namespace}", f"{service_name}.{self.namespace}.svc",
                     f"{service_name}.{self.namespace}.svc.cluster.local"}
            if host in names:
                selector = service["spec"]["selector"].items()
                for pod in self.pods.values():
                    if selector <= pod.labels.items():
                        return pod.address
                raise AssertionError(f"Service {service_name} selects no running pod")
        return None

    def stop(self) -> None:
        """Stop every container at once, as deleting the namespace does, within a short grace:
        the registry's own graceful shutdown would wait out the long-polls its clients left
        parked (up to its --shutdown-grace), which no test here is about."""
        stopping = [service for pod in reversed(list(self.pods.values())) for service in pod._take()]
        for service in stopping:
            if service.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + TEARDOWN_GRACE_S
        for service in stopping:
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            services.stop_group(service, signal.SIGKILL)


@dataclass
class Pod:
    cluster: Cluster
    name: str
    workload: dict[str, Any]
    address: str
    folder: Path
    running: dict[str, services.Service] = field(default_factory=dict)
    last_answer: str = ""

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True)
        self.spec = self.workload["spec"]["template"]["spec"]
        self.labels = self.workload["spec"]["template"]["metadata"]["labels"]
        self.ports = {p["containerPort"] for c in self.spec.get("initContainers", []) + self.spec["containers"]
                      for p in c.get("ports", [])}
        self.folders: dict[str, Path] = {}
        for volume in self.spec.get("volumes", []):
            self.folders[volume["name"]] = self._volume(volume)

    def _volume(self, volume: dict[str, Any]) -> Path:
        if volume["name"] in self.cluster.volumes:
            return self.cluster.volumes[volume["name"]]
        folder = self.folder / volume["name"]
        folder.mkdir()
        if "configMap" in volume:
            data = self.cluster.config_maps[volume["configMap"]["name"]]
            for key, value in data.items():
                (folder / key).write_text(value)
        elif "emptyDir" not in volume and "projected" not in volume:
            raise AssertionError(f"pod {self.name}: no folder given for volume {volume['name']}")
        return folder

    def container(self, name: str) -> dict[str, Any]:
        found = {c["name"]: c for c in self.spec.get("initContainers", []) + self.spec["containers"]}
        return found[name]

    # --- the container's process -------------------------------------------------------------

    def _mounts(self, container: dict[str, Any]) -> list[tuple[str, Path]]:
        mounts = [(m["mountPath"], self.folders[m["name"]]) for m in container.get("volumeMounts", [])]
        return sorted(mounts, key=lambda mount: -len(mount[0]))

    def translate(self, container: dict[str, Any], value: str) -> str:
        for mount_path, folder in self._mounts(container):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(folder) + value[len(mount_path):]
        for own in ("0.0.0.0", "127.0.0.1"):  # the pod's own interfaces
            if value == own:
                return self.address
            for port in self.ports:  # a URL of the pod's loopback names one of its containers' ports
                value = value.replace(f"//{own}:{port}", f"//{self.address}:{port}")
        if "://" in value:
            scheme, rest = value.split("://", 1)
            host = rest.split("/", 1)[0].rsplit(":", 1)[0]
            address = self.cluster.resolve(host)
            if address is not None:
                value = f"{scheme}://{address}{rest[len(host):]}"
        return value

    def environment(self, container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            env.update(self.cluster.secrets[source["secretRef"]["name"]])
        for entry in container.get("env", []):
            if "value" in entry:
                env[entry["name"]] = self.translate(container, str(entry["value"]))
                continue
            reference = entry["valueFrom"]
            if "secretKeyRef" in reference:
                secret, key = reference["secretKeyRef"]["name"], reference["secretKeyRef"]["key"]
                assert key in self.cluster.secrets.get(secret, {}), f"Secret {secret} has no key {key}"
                env[entry["name"]] = self.cluster.secrets[secret][key]
            else:
                field_path = reference["fieldRef"]["fieldPath"]
                env[entry["name"]] = {"metadata.name": self.name, "metadata.namespace": self.cluster.namespace,
                                      "status.podIP": self.address}[field_path]
        return env

    def start(self, name: str, *, extra_env: dict[str, str] | None = None) -> services.Service:
        """Start a container's process as the kubelet would. `extra_env`: what the cluster gives
        a pod beyond its manifest (the Kubernetes API's address), each a setting of the process."""
        container = self.container(name)
        env = {**self.environment(container), **(extra_env or {})}
        if name in PROCESSES:  # a misspelt setting is ignored by pydantic-settings: refuse it here
            unknown = sorted(v for v in env if v.startswith("LORAPLANE_") and v not in variables_of(name))
            assert unknown == [], f"{name} sets variables no setting of `loraplane` reads: {unknown}"
        executable = COMMANDS[container["command"][0]]
        argv = [str(executable)] + [self.translate(container, str(a))
                                    for a in container["command"][1:] + container.get("args", [])]
        # The image's home and working folder lie on its read-only root: whatever a process
        # writes here would fail in the cluster (Pod.unmounted_writes).
        home = self.folder / f"home-{name}"
        home.mkdir(exist_ok=True)
        base = {"PATH": f"{executable.parent}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(home)}
        tmp = dict((path, folder) for path, folder in self._mounts(container)).get("/tmp")
        if tmp is not None:
            base["TMPDIR"] = str(tmp)  # /tmp is the mounted emptyDir
        log = self.folder / f"{name}.log"
        process = subprocess.Popen(argv, env={**base, **env}, cwd=home, stdout=log.open("ab"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
        service = services.Service(process, f"http://{self.address}", log, env=env)
        self.running[name] = service
        return service

    def run_to_completion(self, name: str, timeout_s: float) -> int:
        service = self.start(name)
        try:
            return service.process.wait(timeout=timeout_s)
        finally:
            self.stop(name)

    def stop(self, name: str | None = None) -> None:
        for service in self._take(name):
            services.stop_group(service)

    def _take(self, name: str | None = None) -> list[services.Service]:
        names = [name] if name else list(self.running)[::-1]
        return [service for n in names if (service := self.running.pop(n, None)) is not None]

    def unmounted_writes(self) -> dict[str, list[str]]:
        """What each container wrote to its home or working folder, which its read-only root
        filesystem would have refused."""
        return {path.name.removeprefix("home-"): sorted(str(f.relative_to(path)) for f in path.rglob("*"))
                for path in self.folder.glob("home-*") if any(path.iterdir())}

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    # --- probes --------------------------------------------------------------------------------

    def _port(self, container: dict[str, Any], port: str | int) -> int:
        if isinstance(port, int):
            return port
        return {p["name"]: p["containerPort"] for p in container.get("ports", [])}[port]

    def probe(self, name: str, kind: str) -> bool:
        """One try of a container's probe, as the kubelet makes it."""
        container = self.container(name)
        probe = container[kind]
        service = self.running.get(name)
        if service is not None and service.process.poll() is not None:
            raise AssertionError(f"{self.name}/{name} exited with {service.process.returncode}\n{self.log(name)}")
        if "httpGet" in probe:
            port = self._port(container, probe["httpGet"]["port"])
            try:
                answer = httpx.get(f"http://{self.address}:{port}{probe['httpGet']['path']}",
                                   timeout=probe.get("timeoutSeconds", 1))
            except httpx.HTTPError as error:
                self.last_answer = f"{kind} of {name}: {error!r}"
                return False
            self.last_answer = f"{kind} of {name}: {answer.status_code} {answer.text[:500]}"
            return 200 <= answer.status_code < 400
        port = self._port(container, probe["tcpSocket"]["port"])
        try:
            socket.create_connection((self.address, port), timeout=probe.get("timeoutSeconds", 1)).close()
        except OSError:
            return False
        return True

    def wait_for_probe(self, name: str, kind: str, timeout_s: float | None = None) -> None:
        """Until the probe passes; by default within what the manifest allows a startup probe."""
        container = self.container(name)
        if timeout_s is None:
            startup = container.get("startupProbe", container[kind])
            timeout_s = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) + 10
        self.last_answer = ""
        try:
            services.wait_until(lambda: self.probe(name, kind), timeout_s=timeout_s,
                                what=f"{self.name}/{name}'s {kind}", log=self.folder / f"{name}.log")
        except RuntimeError as error:
            raise AssertionError(f"{error}\nlast answer: {self.last_answer}") from None

    def probes(self, name: str) -> dict[str, bool]:
        container = self.container(name)
        return {kind: self.probe(name, kind) for kind in ("startupProbe", "readinessProbe", "livenessProbe")
                if kind in container}

