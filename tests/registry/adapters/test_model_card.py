"""The README.md peft writes beside an adapter is its model card: accepted, covered by the
version's digest, readable by those who may read the version, and shown in the dashboard as
text; a card too large or not UTF-8 text is refused with nothing stored."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.asserts import assert_refused
from tests.web.test_review import web_session

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
CARD = "# Support replies\n\nTrained on <script>alert('x')</script> tickets & more.\n"


def upload(client, name: str, folder, card: bytes | None):
    parts = [("file", (file, (folder / file).read_bytes())) for file in PEFT_FILES]
    if card is not None:
        parts.append(("file", ("README.md", card)))
    return client.post(f"/v1/adapters/acme/{name}/versions", files=parts)


def test_peft_writes_a_model_card_and_it_is_kept_with_the_version(uploader, base_model, make_adapter,
                                                                  registry, tokens):
    folder = make_adapter(seed=41)
    written = (folder / "README.md").read_bytes()  # peft's save_pretrained wrote it
    response = upload(uploader, "carded", folder, written)

    assert response.status_code == 201, response.text
    files = {entry["name"]: entry for entry in response.json()["files"]}
    assert files["README.md"] == {"name": "README.md", "sha256": hashlib.sha256(written).hexdigest(),
                                  "size": len(written)}
    card = uploader.get("/v1/adapters/acme/carded/versions/1/model-card")
    assert card.status_code == 200 and card.text == written.decode()
    assert card.headers["content-type"] == "text/markdown; charset=utf-8"
    assert card.headers["x-content-type-options"] == "nosniff"
    assert card.headers["content-security-policy"] == "sandbox"


def test_the_dashboard_shows_the_card_as_text_never_as_markup(uploader, base_model, make_adapter,
                                                             registry, tokens):
    response = upload(uploader, "carded-markup", make_adapter(seed=42), CARD.encode())
    assert response.status_code == 201, response.text

    client, _ = web_session(registry.url, tokens["acme_reviewer"])
    page = client.get("/ui/adapters/acme/carded-markup/versions/1")

    assert page.status_code == 200
    assert "Model card" in page.text
    assert "Trained on &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; tickets &amp; more." in page.text
    assert "<script>alert" not in page.text


def test_a_card_is_read_within_its_tenant_only(uploader, base_model, make_adapter, client_for):
    assert upload(uploader, "carded-private", make_adapter(seed=43), CARD.encode()).status_code == 201

    other = client_for("globex_uploader").get("/v1/adapters/acme/carded-private/versions/1/model-card")
    assert_refused(other, 403, "forbidden", "acme")


def test_a_version_without_a_card_answers_404(uploader, base_model, make_adapter):
    assert upload(uploader, "uncarded", make_adapter(seed=44), None).status_code == 201

    assert_refused(uploader.get("/v1/adapters/acme/uncarded/versions/1/model-card"), 404,
                   "model_card_not_found", "acme/uncarded@1 was uploaded without a model card")


@pytest.mark.parametrize(("card", "status", "code", "message"), [
    (b"x" * (256 * 1024 + 1), 413, "model_card_too_large",
     "README.md is 262145 bytes; a model card may have at most 262144"),
    (b"# Card\n\xff\xfe", 422, "invalid_model_card", "README.md is not UTF-8 text (byte 7 cannot be decoded)"),
    (b"# Card\n\x1b[31mred", 422, "invalid_model_card",
     "README.md holds the control character '\\x1b' at character 7"),
])
def test_a_bad_card_is_refused_and_nothing_is_stored(uploader, base_model, make_adapter, stored_state,
                                                    card, status, code, message):
    folder = make_adapter(seed=45)
    before = stored_state()

    assert_refused(upload(uploader, "badly-carded", folder, card), status, code, message)
    assert stored_state() == before
