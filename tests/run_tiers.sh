#!/usr/bin/env bash
# `make test`: every test, as two pytest runs side by side.
#
#   first:  the end-to-end tests that start whole systems of their own (own state directory, own
#           ports), and the relay's leader-loss staging on three Kafka nodes of its own;
#   second: the unit and integration tests (one shared PostgreSQL and Kafka) and the panel's
#           end-to-end package (one system of its own).
#
# Most of either run's time is spent waiting on processes, so on two cores they overlap well; the
# split keeps the two about as long as each other. Each run picks ports from a band of its own
# (EO_TEST_PORTS), so the two never hand out the same port. The first run's output is kept in
# artifacts/test-e2e.log and printed when both are done; the exit status fails if either failed.
set -uo pipefail
python=$1
shift
mkdir -p artifacts
# What both would otherwise fetch at the same moment into the same cache: fetched once, first.
"$python" -m infra.launcher prepare || exit 1
log=artifacts/test-e2e.log
EO_TEST_PORTS=20000-25399 "$python" -m pytest tests/e2e --ignore=tests/e2e/panel \
  tests/integration/test_relay_leader_loss.py "$@" >"$log" 2>&1 &
first=$!
trap 'kill "$first" 2>/dev/null' INT TERM
EO_TEST_PORTS=25500-28999 "$python" -m pytest tests/unit tests/integration tests/e2e/panel \
  --deselect tests/integration/test_relay_leader_loss.py "$@"
second=$?
echo
echo "== unit, integration and panel tests: exit $second; the other end-to-end tests ($log):"
wait "$first"
first_status=$?
cat "$log"
echo "== unit, integration and panel tests: exit $second; the other end-to-end tests: exit $first_status"
exit $((second != 0 || first_status != 0))
