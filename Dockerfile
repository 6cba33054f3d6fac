# The loraplane image: registry, workers, agent and router (each a command of `loraplane`).
# vLLM runs from its own image (vllm/vllm-openai), never from this one. The evaluation worker's
# image adds the models extra (torch, peft) for the merged-weights parity reference:
#   docker build --build-arg EXTRAS=server,models .
FROM python:3.11-slim
ARG EXTRAS=server
WORKDIR /app
COPY pyproject.toml README.md ./
COPY loraplane loraplane
COPY loraplane_client loraplane_client
COPY devkit devkit
COPY signed_digests signed_digests
COPY registry registry
COPY migrations migrations
COPY workers workers
COPY serving serving
COPY web web
COPY plugins/vllm-resolver plugins/vllm-resolver
# The state folders exist before any volume is mounted on them, so a new volume takes their owner.
# The vLLM resolver plugin, for pools that load on demand: copied into vLLM's container at start.
RUN pip install --no-cache-dir ".[${EXTRAS}]" \
    && pip install --no-cache-dir --no-deps --target /opt/loraplane/vllm-plugins ./plugins/vllm-resolver \
    && useradd --system --home /var/lib/loraplane loraplane \
    && mkdir -p /var/lib/loraplane/eval-cache /var/lib/loraplane/attestation-keys /var/lib/loraplane-agent \
    && chown -R loraplane /var/lib/loraplane /var/lib/loraplane-agent
USER loraplane
ENV LORAPLANE_DATA_DIR=/var/lib/loraplane
EXPOSE 8000
CMD ["loraplane", "serve", "--host", "0.0.0.0", "--port", "8000"]
