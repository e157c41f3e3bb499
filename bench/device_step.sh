# Sourced by the device scripts: step SECONDS NAME COMMAND... runs COMMAND with a timeout,
# its output to $OUT/NAME.txt, and records its status in $OUT/steps.txt; never fails the script.
step() {
    local secs=$1 name=$2
    shift 2
    local started=$SECONDS
    timeout -s INT -k 10 "$secs" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc ${secs}s-limit took=$((SECONDS - started))s" >>"$OUT/steps.txt"
    return 0
}
