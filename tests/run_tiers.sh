#!/usr/bin/env bash
# `make test`: the end-to-end tier beside the unit and integration tiers, as two pytest runs.
#
# The end-to-end tests start whole systems of their own (own state directory, own ports); the
# others share one PostgreSQL and one Kafka. Most of either tier's time is spent waiting on
# processes, so on two cores they overlap well. Each run picks ports from a band of its own
# (EO_TEST_PORTS), so the two never hand out the same port. The end-to-end output is kept in
# artifacts/test-e2e.log and printed when both are done; the exit status fails if either failed.
set -uo pipefail
python=$1
shift
mkdir -p artifacts
# What both would otherwise fetch at the same moment into the same cache: fetched once, first.
"$python" -m infra.launcher prepare || exit 1
log=artifacts/test-e2e.log
EO_TEST_PORTS=20000-25399 "$python" -m pytest -m e2e "$@" >"$log" 2>&1 &
e2e=$!
trap 'kill "$e2e" 2>/dev/null' INT TERM
EO_TEST_PORTS=25500-28999 "$python" -m pytest -m "not e2e" "$@"
others=$?
echo
echo "== unit and integration tiers: exit $others; the end-to-end tier ($log):"
wait "$e2e"
e2e_status=$?
cat "$log"
echo "== unit and integration tiers: exit $others; end-to-end tier: exit $e2e_status"
exit $((others != 0 || e2e_status != 0))
