# syntax=docker/dockerfile:1
# kafkalens: the proxy and its runtime dependencies only (no demo/pipeline/test extras).
#   docker build -t kafkalens:0.1.0 \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#   docker run -p 9092:9092 -p 9180:9180 \
#     -v $PWD/my.yaml:/etc/kafkalens/kafkalens.yaml:ro kafkalens:0.1.0
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for the codec's decoding accelerator (codec/_accel.c), in this stage only.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py ./
COPY codec ./codec
COPY proxy ./proxy
COPY pipeline ./pipeline
# Wheels for the project (with codec._accel compiled in) and every runtime dependency,
# so the final stage installs offline and needs no compiler (uvloop, cramjam and crc32c
# ship manylinux wheels). The import check fails the build if the extension was skipped.
RUN pip wheel --wheel-dir /wheels . \
    && pip install --no-index --find-links /wheels kafkalens \
    && cd / && python -c "import codec._accel"

FROM ${PYTHON_IMAGE}
# OCI image annotations (github.com/opencontainers/image-spec, annotations.md): what
# `docker inspect`, registries and scanners show. VERSION is pyproject.toml's version
# (tests/deploy/test_deploy.py holds them equal); REVISION and CREATED come from the build.
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kafkalens" \
      org.opencontainers.image.description="A Kafka-protocol L7 proxy that decodes every request and response, identifies clients, logs and measures." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/${PYTHON_IMAGE}"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A bind mount, not a COPY: the wheels never become a layer of the final image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels kafkalens \
    && groupadd --system --gid 10001 kafkalens \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --shell /usr/sbin/nologin kafkalens
COPY config/kafkalens.yaml /etc/kafkalens/kafkalens.yaml

# Numeric, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
USER 10001:10001
# 9092: Kafka clients (config listeners); 9180: /metrics /healthz /readyz (metrics.listen).
EXPOSE 9092 9180
# GET /healthz with bash's own /dev/tcp, read and [[ ]]: one bash process, no Python
# interpreter started every 10 s (python:slim has no curl or wget). A refused
# connection, a silent port (read -t 2) or any status but 200 fails it.
# Port 9180 is metrics.listen's default: a config that moves it needs --health-cmd too.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9180 && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && read -r -t 2 status <&3 && [[ $status == 'HTTP/1.1 200 '* ]]"]
# SIGTERM drains in-flight requests (limits.shutdown_grace_seconds, 25 s by default):
# give `docker stop` a longer timeout (-t 30 / compose stop_grace_period: 30s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["kafkalens", "proxy"]
CMD ["--config", "/etc/kafkalens/kafkalens.yaml"]
