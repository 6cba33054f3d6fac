"""The dev kit: what makes a whole loraplane run on one machine, for `loraplane up`, the demo, the
tests and the benchmarks. The tiny models and the task kit, the local stack and its vLLM launch
command, and launchers for the real services (PostgreSQL, Redis, an S3 server, the registry,
workers, agents, routers) as plain processes on loopback. It sits below the CLI and above every
service package; tests/ and bench/ build on it, and it never imports either."""
