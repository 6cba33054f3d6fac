# The registry image. vLLM runs from its own image (vllm/vllm-openai), never from this one.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY loraplane loraplane
COPY registry registry
COPY migrations migrations
COPY workers workers
COPY serving serving
COPY web web
RUN pip install --no-cache-dir ".[server]" && useradd --system --home /var/lib/loraplane loraplane \
    && mkdir -p /var/lib/loraplane && chown loraplane /var/lib/loraplane
USER loraplane
ENV LORAPLANE_DATA_DIR=/var/lib/loraplane
EXPOSE 8000
CMD ["loraplane", "serve", "--host", "0.0.0.0", "--port", "8000"]
