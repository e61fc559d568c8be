#!/usr/bin/env bash
# Is the test command green every time? Clone the repository's HEAD into a fresh
# directory, then run CI there (.ci/run: set-up, then every test) N times in a row
# (default 5), keeping each run's log. Prints one line per run (exit status, minutes, the
# pytest summary lines) and exits non-zero if any run failed.
#
#   bash scripts/flake-check.sh [N]
#
# The clone is made with mktemp (never a fixed /tmp path) and kept, with its logs, for
# reading afterwards; the last line says where.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-5}"
work="$(mktemp -d -t latlab-flake-check.XXXXXX)"
git clone --quiet "$PWD" "$work/repo"
failed=0
for i in $(seq 1 "$runs"); do
    log="$work/run-$i.log"
    start=$(date +%s)
    if (cd "$work/repo" && bash .ci/run) >"$log" 2>&1; then status=0; else status=$?; fi
    minutes=$(awk -v s="$start" -v e="$(date +%s)" 'BEGIN { printf "%.1f", (e - s) / 60 }')
    summary=$(grep -E '^[0-9]+ (passed|failed)|^(FAILED|ERROR) ' "$log" | tr '\n' ' ' || true)
    printf 'run %d/%d: exit %d in %s min: %s\n' "$i" "$runs" "$status" "$minutes" "$summary"
    [ "$status" = 0 ] || failed=$((failed + 1))
done
echo "flake-check: $failed of $runs runs failed; clone and logs in $work"
[ "$failed" = 0 ]
