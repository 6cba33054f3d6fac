"""Talking to the registry over its HTTP API, as a person at a terminal does: connection settings,
the registry's errors, uploads with progress, and one way to stop with a message. The CLI
(loraplane/) and the dev kit (devkit/) both build on it, so it imports neither."""
