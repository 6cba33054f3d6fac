"""Serving: the node agent beside each vLLM, and the OpenAI-compatible router.

Empty for now. It will reach the registry over HTTP only, never its database or storage.
"""
