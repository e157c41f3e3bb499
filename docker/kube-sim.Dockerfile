# syntax=docker/dockerfile:1
# Image for kube-sim, the Kubernetes API simulator the local simulation runs against.
# Build from the repository root:  docker build -f docker/kube-sim.Dockerfile -t gpuscale-kube-sim .
# (docker-compose.yml does this; not exercised by CI, see docs/DEPLOYING.md.)

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
EXPOSE 6443
# Healthy once the API port accepts connections.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=5 \
    CMD ["python", "-c", "import os, socket; socket.create_connection((\"127.0.0.1\", int(os.environ.get(\"GPUSCALE_KUBE_SIM_PORT\") or 6443)), 2).close()"]
ENTRYPOINT ["gpuscale", "kube-sim"]
