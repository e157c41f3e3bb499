#!/usr/bin/env bash
# The one command for a lent GPU machine (no network): what the GPU gives the
# collector's NVML backend, and every NVML call behind dcgm-exporter's default
# counters, idle and under a torch load (bench/nvml_probe.py), plus nvidia-smi's
# own view for cross-checking. Everything goes under $OUT; the last thing
# printed is the one-row-per-counter table (summary.md).
#
#   OUT=/tmp/x bash bench/device_nvml.sh
#
# The collector's backend needs msgspec and structlog, which such a machine
# lacks: their cp312 wheels, with nvidia-ml-py and prometheus-client at the
# versions the tests run, sit in .whl/ (ignored by git: carry it). When the
# caller has not installed them into /tmp/site yet, this script does. Every step has a timeout; the whole run
# stays under 3 minutes (typically under one). Exit status 0 unless $OUT cannot
# be written; each step's status is in $OUT/steps.txt. Without a GPU it still
# exits 0 and says so.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/nvml-probe}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT" || exit 1
: >"$OUT/steps.txt"

. bench/device_step.sh

if compgen -G '.whl/*.whl' >/dev/null; then
    if [ ! -e /tmp/site/msgspec ]; then # the caller has not installed them
        step 60 pip-install "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/site .whl/*.whl
    fi
    case ":${PYTHONPATH:-}:" in
    *:/tmp/site:*) ;;
    *) export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
else
    echo "no .whl/: the collector backend part needs msgspec, structlog (carry .whl)" >>"$OUT/steps.txt"
fi

if command -v nvidia-smi >/dev/null; then
    step 15 nvidia-smi nvidia-smi
    step 15 nvidia-smi-q nvidia-smi -q
    step 10 nvidia-smi-nvlink nvidia-smi nvlink --status
    step 10 nvidia-smi-topo nvidia-smi topo -m
else
    echo "nvidia-smi: not on PATH" >>"$OUT/steps.txt"
fi

# Probe: 2 idle ticks, torch load (up to 45 s to start), 5 ticks under it, and
# every counter's call idle and under load; ~40 s with a warm torch import.
step 110 probe "$PY" bench/nvml_probe.py --out "$OUT/nvml" \
    --idle-ticks 2 --seconds 5 --load-seconds 40 --load-ready-s 45

echo "== steps"
cat "$OUT/steps.txt"
echo "== probe output (tail)"
tail -n 12 "$OUT/probe.txt" 2>/dev/null
echo "== summary ($OUT/nvml/summary.md; full table in nvml_probe.md, raw in nvml_probe.json)"
cat "$OUT/nvml/summary.md" 2>/dev/null || echo "no summary: see $OUT/probe.txt"
exit 0
