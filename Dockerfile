# syntax=docker/dockerfile:1
# One image for every role: `processor worker`, `processor executor run`, `processor executor
# mcp` (the [mcp] extra, in EXTRAS), `processor ctl …`, `processor topics create`. Slim, non-root (uid 10001), nothing written outside /tmp, so it runs
# with a read-only root filesystem (mount an emptyDir or tmpfs on /tmp).
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t toolcall-processor .
#   docker run --rm --read-only --tmpfs /tmp toolcall-processor worker --help
ARG PYTHON_VERSION=3.12

FROM python:${PYTHON_VERSION}-slim AS build
# optional extras installed with the processor (comma-separated; "" for none)
ARG EXTRAS=mcp
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/processor
COPY pyproject.toml README.md ./
COPY processor ./processor
RUN /opt/processor/bin/pip install ".${EXTRAS:+[$EXTRAS]}" \
 && /opt/processor/bin/python -m compileall -q /opt/processor/lib

FROM python:${PYTHON_VERSION}-slim
ARG VERSION=0.0.0-dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="toolcall-processor" \
      org.opencontainers.image.description="Streamed LLM tool-call fragments in, validated exactly-once dispatches out" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 processor \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin processor \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/toolcall/state
COPY --from=build /opt/processor /opt/processor
# the example registry and executor, so `make up`'s pipeline runs from the image as it is
COPY examples /app/examples
WORKDIR /app
ENV PATH=/opt/processor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TOOLCALL_PROCESSOR_VERSION=${VERSION} \
    PROCESSOR_METRICS_PORT=9400
USER 10001:10001
EXPOSE 9400
# /healthz answers on the process's own event loop: a stuck loop fails the check
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PROCESSOR_METRICS_PORT', '9400'), timeout=2)"]
ENTRYPOINT ["processor"]
CMD ["--help"]
