# syntax=docker/dockerfile:1
# Image for gpuscale nats-auth, the NATS auth callout of deploy/components/node-auth.
# Build from the repository root:  docker build -f docker/nats-auth.Dockerfile -t gpuscale-nats-auth .
# (deploy/components/node-auth runs it; not exercised by CI, see docs/SECURITY-node-auth.md.)

# --- builder: a wheel of the project, installed with its dependencies into a venv
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared/ shared/
COPY services/ services/
COPY kubesim/ kubesim/
COPY cli/ cli/
RUN pip wheel --wheel-dir /wheels . \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels gpuscale

# --- final: the venv only, no compilers, no sources, no pip cache
FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# A fixed numeric uid so that Kubernetes' runAsNonRoot can verify it; /shared
# is where kube-sim writes its kubeconfig in docker-compose (a named volume
# takes this directory's owner on first use).
RUN groupadd --system --gid 65532 gpuscale \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin gpuscale \
 && mkdir /shared && chown 65532:65532 /shared
COPY --from=builder /opt/venv /opt/venv
USER 65532:65532
EXPOSE 9404
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + (os.environ.get('GPUSCALE_HTTP_PORT') or '9404') + '/healthz', timeout=2).close()"]
ENTRYPOINT ["gpuscale", "nats-auth"]
