"""A small HTTP client for the registry, used by the CLI and the dev kit."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from loraplane_client import credentials


class ClientSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LORAPLANE_", extra="ignore")
    url: str = "http://127.0.0.1:8000"
    token: SecretStr | None = None
    timeout_s: float = 600.0


class RegistryError(Exception):
    def __init__(self, status: int, code: str, message: str, hint: str) -> None:
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status, self.code, self.message, self.hint = status, code, message, hint


def connect(settings: ClientSettings | None = None) -> httpx.Client:
    settings = settings or ClientSettings()
    headers = {}
    token = settings.token.get_secret_value() if settings.token is not None else \
        credentials.saved_token(settings.url)  # from `loraplane login`
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=settings.url, headers=headers, timeout=settings.timeout_s)


def checked(response: httpx.Response) -> Any:
    """Return the JSON body, or raise RegistryError with the registry's own message and hint."""
    if response.is_success:
        return response.json()
    try:
        error = response.json()["error"]
        raise RegistryError(response.status_code, error["code"], error["message"], error.get("hint", ""))
    except (ValueError, KeyError, TypeError):
        raise RegistryError(response.status_code, "http_error", response.text[:500], "") from None
