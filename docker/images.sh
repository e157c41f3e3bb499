#!/usr/bin/env bash
# Build (or push, or save) gpuscale's images (one per docker/*.Dockerfile) with whatever container
# engine this machine has: docker (a running daemon), else podman, else buildah.
#
#   docker/images.sh build        # ghcr.io/gpuscale/gpuscale-<service>:<version>
#   docker/images.sh push         # to REGISTRY (set it to yours first)
#   docker/images.sh save DIR     # one tar per image, for `ctr images import` / `kind load image-archive`
#
# Settings (environment): REGISTRY (default ghcr.io/gpuscale), TAG (default:
# the version in pyproject.toml, which deploy/base/kustomization.yaml names),
# ENGINE (docker | podman | buildah; default: the first that works),
# SERVICES (default: every docker/*.Dockerfile), BUILD_FLAGS (extra flags for the build).
# Prints one line per image with its build time and size on stdout; the
# engine's own output goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY="${REGISTRY:-ghcr.io/gpuscale}"
TAG="${TAG:-$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)}"
SERVICES="${SERVICES:-$(for f in docker/*.Dockerfile; do basename "$f" .Dockerfile; done | tr '\n' ' ')}"
BUILD_FLAGS="${BUILD_FLAGS:-}"

die() { echo "images.sh: $*" >&2; exit 2; }

engine() {
  if [ -n "${ENGINE:-}" ]; then
    command -v "$ENGINE" >/dev/null || die "ENGINE=$ENGINE is not installed"
    echo "$ENGINE"
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    echo docker
  elif command -v podman >/dev/null; then
    echo podman
  elif command -v buildah >/dev/null; then
    echo buildah
  else
    die "no container engine: install docker (with a running daemon), podman or buildah"
  fi
}

image_of() { echo "$REGISTRY/gpuscale-$1:$TAG"; }

build() {
  local engine=$1 service image dockerfile started seconds size
  for service in $SERVICES; do
    image=$(image_of "$service")
    dockerfile="docker/$service.Dockerfile"
    [ -f "$dockerfile" ] || die "no $dockerfile"
    started=$(date +%s.%N)
    # The per-Dockerfile ignore file keeps .venv/ and caches out of the context:
    # BuildKit finds <Dockerfile>.dockerignore itself, podman and buildah are told.
    case "$engine" in
      docker) DOCKER_BUILDKIT=1 docker build $BUILD_FLAGS -f "$dockerfile" -t "$image" \
                --label "org.opencontainers.image.version=$TAG" . >&2 ;;
      podman) podman build $BUILD_FLAGS --ignorefile "$dockerfile.dockerignore" -f "$dockerfile" \
                -t "$image" --label "org.opencontainers.image.version=$TAG" . >&2 ;;
      buildah) buildah bud $BUILD_FLAGS --ignorefile "$dockerfile.dockerignore" -f "$dockerfile" \
                -t "$image" --label "org.opencontainers.image.version=$TAG" . >&2 ;;
      *) die "unknown engine: $engine (docker, podman or buildah)" ;;
    esac
    seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case "$engine" in
      buildah) size=$(buildah images --format '{{.Size}}' "$image" | head -1) ;;
      *) size=$("$engine" image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }') ;;
    esac
    echo "built $image in ${seconds} s, ${size}"
  done
}

push() {
  local engine=$1 service
  for service in $SERVICES; do
    "$engine" push "$(image_of "$service")" >&2
    echo "pushed $(image_of "$service")"
  done
}

save() {
  local engine=$1 dir=$2 service
  mkdir -p "$dir"
  for service in $SERVICES; do
    case "$engine" in
      buildah) buildah push "$(image_of "$service")" "docker-archive:$dir/gpuscale-$service-$TAG.tar:$(image_of "$service")" >&2 ;;
      *) "$engine" save -o "$dir/gpuscale-$service-$TAG.tar" "$(image_of "$service")" >&2 ;;
    esac
    echo "saved $dir/gpuscale-$service-$TAG.tar"
  done
}

case "${1:-build}" in
  build|push|save) ;;
  *) die "usage: $0 build | push | save [DIR]" ;;
esac
# Its own line: `set -e` does not stop on a failed $(engine) used as an argument.
ENGINE_BIN=$(engine) || exit $?
case "${1:-build}" in
  build) build "$ENGINE_BIN" ;;
  push) push "$ENGINE_BIN" ;;
  save) save "$ENGINE_BIN" "${2:-dist/images}" ;;
esac
