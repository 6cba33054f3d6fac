"""The review dashboard: server-rendered pages over the registry's services, under /ui."""
