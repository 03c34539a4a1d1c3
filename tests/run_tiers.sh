#!/usr/bin/env bash
# `make test`: every test, as two pytest runs side by side.
#
#   first:  the end-to-end tests that start whole systems of their own (own state directory, own
#           ports), the relay's leader-loss staging and the example service's contract suite;
#   second: the unit and integration tests and the panel's end-to-end package.
#
# Most of either run's time is spent waiting on processes, so on two cores they overlap well; the
# split keeps the two about as long as each other. Each run has its own PostgreSQL and Kafka for
# the tests that share one (the first on ports of its own, 29532 and 29592, outside both bands
# below), and picks the ports of the servers its tests start from a band of its own
# (EO_TEST_PORTS), so the two never collide. The first run's output is kept in
# artifacts/test-e2e.log and printed when both are done; the exit status fails if either failed.
set -uo pipefail
python=$1
shift
mkdir -p artifacts
# What both would otherwise fetch at the same moment into the same cache: fetched once, first.
"$python" -m infra.launcher prepare || exit 1
log=artifacts/test-e2e.log
shared=$("$python" -c 'from services.settings import Settings; print(Settings().EO_STATE_DIR)')
EO_TEST_PORTS=20000-25399 EO_STATE_DIR="$shared-second" POSTGRES_PORT=29532 KAFKA_PORT=29592 \
  KAFKA_CONTROLLER_PORT=29593 "$python" -m pytest tests/e2e --ignore=tests/e2e/panel \
  tests/integration/test_relay_leader_loss.py tests/integration/test_example_service.py "$@" >"$log" 2>&1 &
first=$!
trap 'kill "$first" 2>/dev/null' INT TERM
EO_TEST_PORTS=25500-28999 "$python" -m pytest tests/unit tests/integration tests/e2e/panel \
  --deselect tests/integration/test_relay_leader_loss.py --deselect tests/integration/test_example_service.py "$@"
second=$?
echo
echo "== unit, integration and panel tests: exit $second; the other end-to-end tests ($log):"
wait "$first"
first_status=$?
cat "$log"
echo "== unit, integration and panel tests: exit $second; the other end-to-end tests: exit $first_status"
exit $((second != 0 || first_status != 0))
