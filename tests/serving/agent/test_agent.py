"""The agent converges a real vLLM on the pool's active set, survives each fault on purpose, and
serves only what an attestation proves, from bytes hashed again before every load."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import httpx
from sqlalchemy import insert, select

from devkit import services
from devkit.pipeline_steps import upload_dir
from devkit.services import wait_for
from registry.tables import AdapterVersion, Attestation
from signed_digests.digests import file_sha256
from tests.serving.agent.conftest import POOL
from tests.support.nodes import bound_address, complete, served_adapters
from devkit.units_of_work import unit_of_work


def rollout_node(admin, node_id: str) -> dict:
    nodes = admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]
    return next((n for n in nodes if n["node_id"] == node_id), {})


def metric(agent_url: str, name: str) -> float:
    """A sample's value by its exact name and labels, e.g. 'x_total{reason="digest"}'."""
    for line in httpx.get(agent_url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_promoted_version_is_loaded_and_answers_and_a_replaced_one_is_unloaded(
        start_agent, promote, node_vllm, task_kit, admin):
    agent = start_agent()
    row = task_kit.suites["digits_to_words"][0]

    promote("node-digits", task_kit.adapters["digits_to_words"])

    served = wait_for(lambda: "acme/node-digits@1" in served_adapters(node_vllm.url), what="the load")
    assert served
    assert row["reference"].strip() in complete(node_vllm.url, "acme/node-digits@1", row["prompt"])
    assert "static-reverse" in served_adapters(node_vllm.url)  # loaded at vLLM's start: not ours
    node = wait_for(lambda: (n := rollout_node(admin, "node-1")) and n["converged"] and n, what="convergence")
    assert node["drift"] == {"missing": [], "extra": [], "wrong_digest": []}

    promote("node-digits", task_kit.adapters["digits_to_words_v2"])  # v1 retires, then goes

    wait_for(lambda: "acme/node-digits@2" in served_adapters(node_vllm.url), what="v2")
    wait_for(lambda: "acme/node-digits@1" not in served_adapters(node_vllm.url), timeout_s=30,
             what="v1 unloaded once every node moved on")
    assert "static-reverse" in served_adapters(node_vllm.url)
    generation = admin.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
    wait_for(lambda: metric(agent.url, "loraplane_agent_generation_applied") == generation, what="the gauge")
    assert metric(agent.url, "loraplane_agent_adapters_loaded") == 1
    assert metric(agent.url, "loraplane_agent_load_seconds_count") == 2
    assert metric(agent.url, "loraplane_agent_reconcile_passes_total") >= 2
    assert metric(agent.url, "loraplane_agent_seconds_since_sync") < 15
    health = httpx.get(agent.url + "/healthz").json()
    assert health["vllm_up"] and health["generation"] == generation


def test_an_agent_killed_mid_load_converges_and_adopts_what_is_loaded(start_agent, promote, node_vllm,
                                                                     task_kit, admin):
    agent = start_agent()
    before = set(served_adapters(node_vllm.url))
    promote("node-reverse", task_kit.adapters["reverse_words"])
    os.killpg(agent.process.pid, signal.SIGKILL)  # within milliseconds of the approval
    agent.process.wait()

    again = start_agent(fresh=False)

    wait_for(lambda: "acme/node-reverse@1" in served_adapters(node_vllm.url), what="convergence")
    passes = metric(again.url, "loraplane_agent_reconcile_passes_total")
    wait_for(lambda: metric(again.url, "loraplane_agent_reconcile_passes_total") >= passes + 3,
             what="a few more passes")
    loads = metric(again.url, "loraplane_agent_load_seconds_count")
    already = len([n for n in before if n.startswith("acme/")])
    assert loads <= 1, (loads, already)  # at most the one the kill interrupted; none adopted ones
    assert wait_for(lambda: rollout_node(admin, "node-1").get("converged"), what="report")


def test_the_node_keeps_serving_while_the_registry_is_down_and_converges_after(
        start_agent, promote, node_vllm, agent_registry, task_kit, admin):
    agent = start_agent()
    wanted = {e["served_name"] for e in admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"]}
    wait_for(lambda: wanted <= set(served_adapters(node_vllm.url)), what="the set")

    agent_registry.stop()
    promote("node-digits-b", task_kit.adapters["digits_to_words"])  # through the other registry
    wait_for(lambda: metric(agent.url, 'loraplane_agent_failures_total{reason="registry_unavailable"}') >= 1,
             timeout_s=20, what="the agent to notice")
    time.sleep(1)  # time itself: a while without the registry, still serving, and counted as such
    assert wanted <= set(served_adapters(node_vllm.url))  # still serving the last-known-good set
    row = task_kit.suites["digits_to_words"][0]
    assert row["reference"].strip() in complete(node_vllm.url, "acme/node-digits@2", row["prompt"])
    assert httpx.get(agent.url + "/healthz").json()["seconds_since_sync"] >= 1
    assert "acme/node-digits-b@1" not in served_adapters(node_vllm.url)
    agent_registry.restart()

    wait_for(lambda: "acme/node-digits-b@1" in served_adapters(node_vllm.url), timeout_s=30,
             what="convergence after the registry came back")


def test_bytes_swapped_in_the_store_are_refused_and_reported(start_agent, promote, node_vllm, s3_client,
                                                            task_kit, admin, uploader, tmp_path):
    from devkit.tiny_model import build_adapter
    from tests.conftest import BUCKET, KIT_BASE

    folder = build_adapter(task_kit.base_dir, tmp_path / "swapped", r=8, seed=4242, base_model_name=KIT_BASE)
    agent = start_agent()
    version = upload_dir(uploader, "acme/swapped", folder)
    weights = next(f for f in version["files"] if f["name"] == "adapter_model.safetensors")
    key = f"blobs/sha256/{weights['sha256'][:2]}/{weights['sha256']}"
    s3_client.put_object(Bucket=BUCKET, Key=key, Body=b"not the approved bytes" * 100)

    promote("swapped", folder)

    node = wait_for(lambda: next((f for f in rollout_node(admin, "node-1").get("failures", [])
                                  if f["served_name"] == "acme/swapped@1"), None), what="the failure")
    assert "sha256 mismatch for adapter_model.safetensors of acme/swapped@1" in node["reason"]
    assert "acme/swapped@1" not in served_adapters(node_vllm.url)
    passes = metric(agent.url, "loraplane_agent_reconcile_passes_total")
    # Several passes: the same bad bytes are not fetched again and again.
    wait_for(lambda: metric(agent.url, "loraplane_agent_reconcile_passes_total") >= passes + 4,
             what="several more passes")
    assert metric(agent.url, 'loraplane_agent_failures_total{reason="digest"}') == 1


def test_a_load_vllm_refuses_is_reported_with_vllms_reason(start_agent, promote, node_vllm, task_kit,
                                                           admin, tmp_path):
    from devkit.tiny_model import build_adapter
    from tests.conftest import KIT_BASE

    folder = build_adapter(task_kit.base_dir, tmp_path / "wide", r=32, seed=7, base_model_name=KIT_BASE)
    start_agent()

    promote("too-wide-for-node", folder)

    failure = wait_for(lambda: next((f for f in rollout_node(admin, "node-1").get("failures", [])
                                     if f["served_name"] == "acme/too-wide-for-node@1"), None),
                       what="the refusal")
    assert "HTTP 500" in failure["reason"] and "max_lora_rank" in failure["reason"]
    assert "acme/too-wide-for-node@1" not in served_adapters(node_vllm.url)


def test_two_nodes_converge_independently(start_agent, node_vllm, second_node_vllm, admin):
    start_agent("node-1")
    start_agent("node-2", vllm_url=second_node_vllm.url)
    active = admin.get(f"/v1/pools/{POOL}/active-set").json()
    loadable = {e["served_name"] for e in active["entries"]} - {"acme/swapped@1", "acme/too-wide-for-node@1"}

    for vllm in (node_vllm, second_node_vllm):
        wait_for(lambda url=vllm.url: loadable <= set(served_adapters(url)), timeout_s=30, what="both nodes")
    def both_reported():
        nodes = {n["node_id"]: n for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}
        return {"node-1", "node-2"} <= set(nodes) and all(
            nodes[n]["generation"] == active["generation"] for n in ("node-1", "node-2")) and nodes

    nodes = wait_for(both_reported, what="both reports")
    assert nodes["node-1"]["drift"]["missing"] == nodes["node-2"]["drift"]["missing"] == [
        "acme/swapped@1", "acme/too-wide-for-node@1"]  # refused on both, and reported by both


def test_a_restarted_agent_serves_its_last_known_good_set_while_the_registry_is_away(
        start_agent, node_vllm, agent_registry, admin):
    agent = start_agent()
    wanted = {e["served_name"] for e in admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"]}
    wanted -= {"acme/swapped@1", "acme/too-wide-for-node@1"}
    wait_for(lambda: wanted <= set(served_adapters(node_vllm.url)), what="the set")
    agent_registry.stop()
    services.stop_group(agent)
    lost = sorted(wanted)[0]
    assert httpx.post(node_vllm.url + "/v1/unload_lora_adapter", json={"lora_name": lost}).status_code == 200

    again = start_agent(fresh=False)  # the registry is still away: only the set on disk says what to serve

    wait_for(lambda: lost in served_adapters(node_vllm.url), timeout_s=20, what="the reload from disk")
    assert httpx.get(again.url + "/healthz").json()["generation"] == admin.get(
        f"/v1/pools/{POOL}/active-set").json()["generation"]
    agent_registry.restart()


def test_an_unreachable_store_is_retried_and_reported(promote, node_vllm, service_dir,
                                                      registry, s3_client, task_kit, admin, tmp_path):
    """This node's registry signs URLs for a second S3 server, which is down at first."""
    from devkit.tiny_model import build_adapter
    from tests.conftest import BUCKET, KIT_BASE

    port = services.free_port()
    env = {k: v for k, v in registry.env.items() if k.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    env["LORAPLANE_S3_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    # /readyz is not waited on: the store is down, and the active set needs only the database.
    far_registry = services.start_registry(service_dir / "far-registry", env)
    agent = store = None
    try:
        agent = services.start_agent(service_dir / "agent-far", pool=POOL, vllm_url=node_vllm.url,
                                     registry_url=far_registry.url, token=admin_node_token(admin),
                                     node_id="node-far", metrics_port=services.free_port())
        folder = build_adapter(task_kit.base_dir, tmp_path / "far", r=8, seed=99, base_model_name=KIT_BASE)
        version = promote("far-away", folder)

        failure = wait_for(lambda: next((f for f in rollout_node(admin, "node-far").get("failures", [])
                                         if f["served_name"] == "acme/far-away@1"), None), what="the failure")
        assert "ConnectError" in failure["reason"]
        assert metric(agent.url, 'loraplane_agent_failures_total{reason="download"}') >= 1

        store = services.start_s3(service_dir / "s3-far", port=port)  # the store comes back
        far_client = services.s3_client(store.url)
        far_client.create_bucket(Bucket=BUCKET)
        for spec in version["files"]:
            key = f"blobs/sha256/{spec['sha256'][:2]}/{spec['sha256']}"
            far_client.put_object(Bucket=BUCKET, Key=key,
                                  Body=s3_client.get_object(Bucket=BUCKET, Key=key)["Body"].read())

        wait_for(lambda: "acme/far-away@1" in served_adapters(node_vllm.url), timeout_s=20,
                 what="the retry")
    finally:
        for process in (store, far_registry):
            if process:
                process.stop()
        if agent:
            services.stop_group(agent)


def admin_node_token(admin) -> str:
    return admin.post("/v1/tokens", json={"subject": "far-node", "role": "node", "pool": POOL,
                                          "instance_id": "node-far",
                                          "vllm_url": bound_address("node-far")}).json()["token"]


def test_a_restarted_vllm_gets_everything_back_but_a_file_replaced_while_it_was_down(
        start_agent, promote, node_vllm, task_kit, admin, tmp_path):
    """Within seconds of vLLM's restart the agent has loaded the whole set again, but for the
    version whose cached file was swapped while vLLM was down: that one is refetched, never served
    from the swapped bytes. (One restart for both claims: a vLLM start is the suite's dearest step.)

    The kit's reverse_words weights have the shape of digits_to_words': vLLM would load them
    without a word, so only the agent's re-hash stands between them and the pool's traffic."""
    row = task_kit.suites["digits_to_words"][0]
    folder = tmp_path / "digits"  # the approved bytes, in a version of their own (its own cache folder)
    shutil.copytree(task_kit.adapters["digits_to_words"], folder)
    with (folder / "adapter_config.json").open("a") as config:
        config.write("\n")
    start_agent()
    promote("node-tamper", folder)
    wait_for(lambda: "acme/node-tamper@1" in served_adapters(node_vllm.url), what="the load")
    wanted = {e["served_name"] for e in admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"]}
    # The earlier tests' versions that serve (some were refused on purpose): back at once.
    untouched = (wanted & set(served_adapters(node_vllm.url))) - {"acme/node-tamper@1"}
    assert untouched
    assert row["reference"].strip() in complete(node_vllm.url, "acme/node-tamper@1", row["prompt"])
    cached = Path(served_adapters(node_vllm.url)["acme/node-tamper@1"]) / "adapter_model.safetensors"
    approved, other = file_sha256(cached), task_kit.adapters["reverse_words"] / "adapter_model.safetensors"

    node_vllm.stop()
    cached.parent.chmod(0o755)  # what anyone with the agent's rights on the node's disk can do
    cached.unlink()
    shutil.copyfile(other, cached)
    node_vllm.restart()
    healthy = time.monotonic()

    wait_for(lambda: untouched <= set(served_adapters(node_vllm.url)), timeout_s=10, what="reload")
    assert time.monotonic() - healthy < 10
    incident = wait_for(lambda: next((i for i in rollout_node(admin, "node-1").get("incidents", [])
                                      if i["served_name"] == "acme/node-tamper@1"), None),
                        timeout_s=60, what="the incident in the rollout")
    assert incident["kind"] == "tampered"
    assert incident["reason"] == (
        f"adapter_model.safetensors changed on the node's disk after it was verified: sha256 "
        f"{approved[:12]}… approved, {file_sha256(other)[:12]}… found")
    wait_for(lambda: "acme/node-tamper@1" in served_adapters(node_vllm.url), timeout_s=30, what="the reload")
    assert file_sha256(cached) == approved  # fresh bytes from the store
    assert row["reference"].strip() in complete(node_vllm.url, "acme/node-tamper@1", row["prompt"])
    # What the swapped weights would have answered (vLLM loaded the same file at its start):
    assert row["reference"].strip() not in complete(node_vllm.url, "static-reverse", row["prompt"])


def test_another_folder_loaded_under_a_served_name_is_unloaded_and_reported(start_agent, node_vllm, task_kit, admin):
    """Anyone who reaches vLLM's port can swap what a served name answers with; the agent puts
    the approved bytes back and says so."""
    row = task_kit.suites["digits_to_words"][0]
    start_agent()
    name = admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"][0]["served_name"]
    wait_for(lambda: name in served_adapters(node_vllm.url), what="the set")
    approved_folder, approved_answer = served_adapters(node_vllm.url)[name], complete(node_vllm.url, name, row["prompt"])
    planted = str(task_kit.adapters["reverse_words"])
    assert httpx.post(node_vllm.url + "/v1/unload_lora_adapter", json={"lora_name": name}).status_code == 200
    assert httpx.post(node_vllm.url + "/v1/load_lora_adapter",
                      json={"lora_name": name, "lora_path": planted}).status_code == 200

    incident = wait_for(lambda: next((i for i in rollout_node(admin, "node-1").get("incidents", [])
                                      if i["served_name"] == name and i["kind"] == "foreign"), None),
                        timeout_s=30, what="the incident in the rollout")
    assert incident["reason"] == (f"vLLM held {name} loaded from {planted!r}, a folder outside this node's "
                                  "verified cache; unloaded, to be loaded from the approved bytes")
    wait_for(lambda: served_adapters(node_vllm.url).get(name) == approved_folder,
             timeout_s=30, what="the approved bytes loaded again")
    assert complete(node_vllm.url, name, row["prompt"]) == approved_answer


def test_database_edits_without_the_signing_key_are_refused_with_the_reason_in_the_rollout(
        start_agent, promote, node_vllm, task_kit, admin, engine, tmp_path):
    """Someone holding the database's credentials, not the signing key, deletes an approved
    version's attestations, then swaps its digest for another version's, and bumps the pool's
    generation each time so that nodes fetch the edited set. The node loads the version in
    neither case, says why, and leaves the rest as it was."""
    from devkit.tiny_model import build_adapter
    from registry.active_set.writing.change import new_generation
    from registry.tables import Pool
    from tests.conftest import KIT_BASE

    folder = build_adapter(task_kit.base_dir, tmp_path / "edited", r=8, seed=71, base_model_name=KIT_BASE)
    edited = promote("node-edited", folder)  # while no agent runs: nothing of it is loaded yet
    other = next(e["digest"] for e in admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"]
                 if e["served_name"] != "acme/node-edited@1")
    serving_before = {n for n in served_adapters(node_vllm.url) if n.startswith("acme/")}
    with unit_of_work(engine) as session:
        pool_id = session.scalar(select(Pool.id).where(Pool.name == POOL))
        version_id = session.scalar(select(AdapterVersion.id).where(AdapterVersion.digest == edited["digest"]))
        removed = session.scalars(select(Attestation).where(Attestation.version_id == version_id)).all()
        removed_rows = [{c.name: getattr(row, c.name) for c in Attestation.__table__.columns} for row in removed]
        for row in removed:
            session.delete(row)
        new_generation(session, pool_id)

    def reason() -> str | None:
        return next((f["reason"] for f in rollout_node(admin, "node-1").get("failures", [])
                     if f["served_name"] == "acme/node-edited@1"), None)

    try:
        start_agent()
        assert wait_for(reason, what="the refusal in the rollout") == (
            "refused, not proven: the registry sent no attestation for it")
        with unit_of_work(engine) as session:
            session.execute(insert(Attestation), removed_rows)
            session.get(AdapterVersion, version_id).digest = other
            new_generation(session, pool_id)

        assert wait_for(lambda: (r := reason()) and "digest" in r and r, what="the second refusal") == (
            f"refused, not proven: the attestation approves digest {edited['digest'][:12]}…, "
            f"not {other[:12]}…")
        served = set(served_adapters(node_vllm.url))
        assert "acme/node-edited@1" not in served
        assert serving_before <= served
        assert httpx.get(admin.base_url.join("/readyz")).status_code == 200
    finally:  # the database as it was, for whatever reads it after this module
        with unit_of_work(engine) as session:
            session.get(AdapterVersion, version_id).digest = edited["digest"]
            if not session.scalar(select(Attestation.id).where(Attestation.version_id == version_id)):
                session.execute(insert(Attestation), removed_rows)
            new_generation(session, pool_id)
