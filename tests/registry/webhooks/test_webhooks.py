"""Promotion events reach webhooks signed, and a failing receiver is retried until it answers,
or until the attempts run out, with the reason kept."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from devkit import services
from devkit.services import wait_for
from devkit.pipeline_steps import request_promotion
from registry.webhooks import signing
from tests.support.asserts import assert_refused
from tests.support.metrics import metric_at


class Receiver:
    """A real HTTP endpoint that fails its first `failures` requests with a 500."""

    def __init__(self, failures: int) -> None:
        self.failures, self.requests = failures, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body, time.monotonic()))
                status = 500 if len(receiver.requests) <= receiver.failures else 204
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def housekeeper(service_dir, registry):
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.update({"LORAPLANE_WEBHOOK_BACKOFF_S": "0.3", "LORAPLANE_WEBHOOK_MAX_ATTEMPTS": "3",
                "LORAPLANE_WEBHOOK_TIMEOUT_S": "2", "LORAPLANE_METRICS_PORT": str(services.free_port()),
                "LORAPLANE_METRICS_HOST": "127.0.0.1"})
    env.pop("LORAPLANE_DATA_DIR", None)
    worker = services.start_housekeeper(service_dir / "housekeeper", env)
    yield worker
    services.stop_group(worker)


def test_a_promotion_event_is_delivered_signed_after_retries(housekeeper, client_for, promo_pools,
                                                            make_ready, uploader):
    receiver = Receiver(failures=2)
    acme_admin = client_for("acme_admin")
    created = acme_admin.post("/v1/webhooks", json={"url": receiver.url, "events": ["promotion.requested"],
                                                    "tenant": "acme"})
    assert created.status_code == 201, created.text
    hook = created.json()
    assert hook["secret"].startswith("whsec_")
    assert "secret" not in acme_admin.get("/v1/webhooks").json()[0]

    requested = request_promotion(uploader, promo_pools["open"], make_ready("hooked"))
    assert requested.status_code == 201, requested.text
    promotion = requested.json()

    wait_for(lambda: len(receiver.requests) >= 3, what="three delivery attempts")
    headers, body, _ = receiver.requests[-1]
    payload = json.loads(body)
    assert payload["event"] == "promotion.requested"
    assert payload["data"]["id"] == promotion["id"] and payload["data"]["served_name"] == "acme/hooked@1"
    assert headers["X-Loraplane-Event"] == "promotion.requested"
    assert signing.verify(hook["secret"], body, headers["X-Loraplane-Signature"])
    assert not signing.verify("whsec_wrong", body, headers["X-Loraplane-Signature"])
    assert {h["X-Loraplane-Delivery"] for h, _, _ in receiver.requests} == {str(payload["id"])}
    gaps = [b[2] - a[2] for a, b in zip(receiver.requests, receiver.requests[1:])]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6, gaps  # the backoff doubles: 0.3 s, then 0.6 s
    delivery = wait_for(lambda: next((d for d in acme_admin.get(f"/v1/webhooks/{hook['id']}/deliveries").json()
                                      if d["state"] == "delivered"), None), what="the delivery")
    assert delivery["attempts"] == 3 and delivery["last_status"] == 204
    receiver.close()
    assert acme_admin.delete(f"/v1/webhooks/{hook['id']}").status_code == 204


def test_a_receiver_that_keeps_failing_is_given_up_with_the_reason(housekeeper, admin, promo_pools,
                                                                   make_ready, uploader):
    receiver = Receiver(failures=100)
    hook = admin.post("/v1/webhooks", json={"url": receiver.url, "events": ["promotion.requested"]}).json()

    requested = request_promotion(uploader, promo_pools["open"], make_ready("unheard"))
    assert requested.status_code == 201, requested.text

    delivery = wait_for(lambda: next((d for d in admin.get(f"/v1/webhooks/{hook['id']}/deliveries").json()
                                      if d["state"] == "failed"), None), what="the delivery to be given up")
    assert delivery["attempts"] == 3 and delivery["last_status"] == 500
    assert delivery["last_error"].startswith("HTTP 500")
    # Nothing can be waited on here: no fourth attempt is the point. A retry would come after the
    # next backoff, 0.3 s * 2**2 = 1.2 s; watch a little longer than that.
    time.sleep(1.5)
    assert len(receiver.requests) == 3
    receiver.close()
    admin.delete(f"/v1/webhooks/{hook['id']}")


def test_the_housekeepers_metrics_count_the_attempts_for_a_metrics_token_only(housekeeper, client_for, tokens):
    # After the two tests above: one delivery sent on its third attempt, one given up after three.
    url = f"http://127.0.0.1:{housekeeper.env['LORAPLANE_METRICS_PORT']}/metrics"
    scraper = httpx.Client(headers={"Authorization": f"Bearer {tokens['scraper']}"})
    wait_for(lambda: metric_at(scraper, url, "loraplane_housekeeper_last_round_timestamp_seconds",
                               loop="canary-analysis") > 0, what="a round of canary analysis")
    assert metric_at(scraper, url, "loraplane_housekeeper_webhook_attempts_total", outcome="delivered") >= 1
    assert metric_at(scraper, url, "loraplane_housekeeper_webhook_attempts_total", outcome="failed") >= 1
    assert metric_at(scraper, url, "loraplane_housekeeper_webhook_attempts_total", outcome="retrying") >= 4

    nobody = httpx.get(url)
    assert nobody.status_code == 401 and "send a metrics token" in nobody.text
    uploader = httpx.get(url, headers={"Authorization": f"Bearer {tokens['acme_uploader']}"})
    assert uploader.status_code == 403 and "this uploader token may not read metrics" in uploader.text
    assert "loraplane_housekeeper" not in nobody.text + uploader.text
    wrong = httpx.get(url, headers={"Authorization": "Bearer lpt_not-a-token"})
    assert wrong.status_code == 401


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    ({"url": "ftp://example.com/x"}, 422, "invalid_request", "url"),
    ({"url": "http://example.com/x", "events": ["promotion.exploded"]}, 422, "unknown_event",
     "unknown webhook events: promotion.exploded"),
    ({"url": "http://example.com/x", "events": []}, 422, "invalid_request", "events"),
    ({"url": "http://169.254.169.254/latest/meta-data"}, 422, "internal_webhook_url",
     "webhook URL refused: 169.254.169.254 is an internal address"),
    ({"url": "http://10.0.0.7:8000/hook"}, 422, "internal_webhook_url", "10.0.0.7 is an internal address"),
    ({"url": "http://[::1]:5432/"}, 422, "internal_webhook_url", "::1 is an internal address"),
    # Allowed here is 127.0.0.0/8, as written or in IPv6 form; nothing else inside.
    ({"url": "http://100.64.0.1/hook"}, 422, "internal_webhook_url",
     "webhook URL refused: 100.64.0.1 is an internal address"),
    ({"url": "http://[::ffff:10.0.0.7]/hook"}, 422, "internal_webhook_url",
     "webhook URL refused: ::ffff:a00:7 is an internal address (it reaches 10.0.0.7)"),
    ({"url": "http://[2002:a9fe:a9fe::]/hook"}, 422, "internal_webhook_url",
     "webhook URL refused: 2002:a9fe:a9fe:: is an internal address (it embeds 169.254.169.254)"),
    ({"url": "http://example.com/" + "x" * 2000}, 422, "invalid_request", "url"),
    ({"url": "http://example.com/x", "tenant": "ac\u0000me"}, 422, "invalid_request", "tenant"),
])
def test_bad_webhooks_are_refused(admin, body, status, code, message):
    before = admin.get("/v1/webhooks").json()
    assert_refused(admin.post("/v1/webhooks", json=body), status, code, message)
    assert admin.get("/v1/webhooks").json() == before
    assert admin.get("/readyz").status_code == 200


def test_tenant_admins_manage_only_their_tenants_webhooks(client_for):
    assert_refused(client_for("acme_admin").post("/v1/webhooks", json={"url": "http://example.com/x"}),
                   403, "forbidden", "")
    hook = client_for("acme_admin").post("/v1/webhooks", json={"url": "http://example.com/x",
                                                               "tenant": "acme"}).json()
    assert_refused(client_for("globex_admin").get(f"/v1/webhooks/{hook['id']}/deliveries"), 404,
                   "webhook_not_found", f"webhook {hook['id']} does not exist")
    assert_refused(client_for("globex_admin").delete(f"/v1/webhooks/{hook['id']}"), 404,
                   "webhook_not_found", "does not exist")
    client_for("acme_admin").delete(f"/v1/webhooks/{hook['id']}")


def test_the_audit_log_keeps_where_a_webhook_points_not_its_secret_path(client_for, admin):
    created = client_for("acme_admin").post("/v1/webhooks", json={
        "url": "http://127.0.0.1:9/services/T000/B000/sEcReTsEcReT?token=hunter2", "tenant": "acme"})
    assert created.status_code == 201, created.text
    event = admin.get("/v1/audit", params={"action": "webhook.create",
                                           "subject": f"webhook/{created.json()['id']}"}).json()["items"][0]
    assert event["after"]["url"] == "http://127.0.0.1:9/…"
    assert "sEcReT" not in json.dumps(event) and "hunter2" not in json.dumps(event)
