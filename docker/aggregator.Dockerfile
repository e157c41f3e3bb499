# syntax=docker/dockerfile:1
# Image for the gpuscale aggregator.
# Build from the repository root:  docker build -f docker/aggregator.Dockerfile -t gpuscale-aggregator .
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
# The window's hot loops compiled (without them the same loops run in Python, ~3x the CPU per
# sample; the aggregator's start-up log says which: compiled_loop). Cython in a throwaway venv
# (a Debian base's pip installs nothing system-wide); python3-dev: the headers where the base is
# Debian's own Python (bench/containers.sh), the official image carries its own. A build that
# fails leaves the Python loops, never a failed image.
RUN (apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev python3-dev \
     && python -m venv /tmp/cython && /tmp/cython/bin/pip install 'cython>=3.0' setuptools \
     && /tmp/cython/bin/cythonize -i -3 -q services/aggregator/gpuscale_aggregator/core/_loops.pyx) \
    || echo "the aggregator's compiled loops did not build: the image runs them in Python"; \
    rm -rf /var/lib/apt/lists/* /tmp/cython services/aggregator/build
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
EXPOSE 9401
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + (os.environ.get('GPUSCALE_HTTP_PORT') or '9401') + '/healthz', timeout=2).close()"]
ENTRYPOINT ["gpuscale", "aggregator"]
