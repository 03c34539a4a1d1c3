#!/usr/bin/env bash
# `make test`: every test, as three pytest runs side by side.
#
#   first:  the end-to-end tests that start whole systems of their own (own state directory, own
#           ports), but the one with the Java and TypeScript consumers; and three integration
#           modules that start servers of their own (a broker to freeze, one to stop, a Connect
#           worker), which would otherwise make the second run the last to end by minutes;
#   second: the unit and integration tests and the panel's end-to-end package;
#   third:  what runs the Java and TypeScript consumers (the black-box contract suite, the saga
#           with either in the inventory slot), the HTTP APIs' conformance, the relay's leader-loss
#           staging, the example service's contract suite, the PostgreSQL pair's failovers and the
#           system with share groups.
#
# On two cores the three keep both cores busy (/proc/stat over a whole run: 88 % busy, 89-100 %
# in its first ten minutes; JVMs about a third of the CPU, Python processes about half): a fourth
# run would not shorten it, less CPU does. The split keeps the three about as long as each other,
# so that none runs its last minutes alone on the machine. Each
# run has its own PostgreSQL and Kafka for the tests that share one (the first on ports 29532 and
# 29592, the third on 29632 and 29692, outside every band below), and picks the ports of the
# servers its tests start from a band of its own (EO_TEST_PORTS), so they never collide. The
# first and third runs' output is kept in artifacts/test-e2e.log and artifacts/test-third.log and
# printed when all are done (the second's is printed as it runs and kept in
# artifacts/test-second.log); then every failure's summary line (and a hang's, see
# tests/support/hang_guard.py), and the exit status fails if any failed. COLUMNS is wide so that
# pytest's summary lines keep their messages.
set -uo pipefail
export COLUMNS=${COLUMNS:-200}
python=$1
shift
mkdir -p artifacts
# What they would otherwise fetch at the same moment into the same cache: fetched once, first.
"$python" -m infra.launcher prepare || exit 1
first_log=artifacts/test-e2e.log
third_log=artifacts/test-third.log
second_log=artifacts/test-second.log
shared=$("$python" -c 'from services.settings import Settings; print(Settings().EO_STATE_DIR)')
THIRD=(tests/integration/test_black_box_contract.py tests/e2e/test_inventory_implementations.py
       tests/integration/test_api_conformance.py tests/integration/test_relay_leader_loss.py
       tests/integration/test_example_service.py tests/e2e/test_postgres_pair.py
       tests/e2e/test_share_groups_system.py)
FIRST_TOO=(tests/integration/test_group_coordinator_freeze.py tests/integration/test_debezium_relay.py
           tests/integration/test_outbox_relay.py)
deselect=()
for path in "${THIRD[@]}"; do deselect+=(--deselect "$path"); done
first_deselect=("${deselect[@]}")
for path in "${FIRST_TOO[@]}"; do deselect+=(--deselect "$path"); done
EO_TEST_PORTS=20000-25399 EO_STATE_DIR="$shared-second" POSTGRES_PORT=29532 KAFKA_PORT=29592 \
  KAFKA_CONTROLLER_PORT=29593 "$python" -m pytest tests/e2e "${FIRST_TOO[@]}" --ignore=tests/e2e/panel \
  "${first_deselect[@]}" "$@" \
  >"$first_log" 2>&1 &
first=$!
EO_TEST_PORTS=30000-32000 EO_STATE_DIR="$shared-third" POSTGRES_PORT=29632 KAFKA_PORT=29692 \
  KAFKA_CONTROLLER_PORT=29693 "$python" -m pytest "${THIRD[@]}" "$@" >"$third_log" 2>&1 &
third=$!
: >"$second_log"  # there before tail opens it
EO_TEST_PORTS=25500-28999 "$python" -m pytest tests/unit tests/integration tests/e2e/panel "${deselect[@]}" "$@" \
  >>"$second_log" 2>&1 &
second_pid=$!
trap 'kill "$first" "$second_pid" "$third" 2>/dev/null' INT TERM
# Followed until pytest itself ends, not until every process holding its output does (a server a
# test started and left behind would keep a pipe open for ever).
tail -n +1 -f --pid="$second_pid" "$second_log"
wait "$second_pid"
second=$?
echo
echo "== unit, integration and panel tests: exit $second; the other end-to-end tests, a frozen coordinator, Debezium, the relay ($first_log):"
wait "$first"
first_status=$?
cat "$first_log"
echo "== the Java and TypeScript consumers, the APIs' conformance, leader loss, the example, the pair ($third_log):"
wait "$third"
third_status=$?
cat "$third_log"
echo "== unit, integration and panel tests: exit $second; the other end-to-end tests: exit $first_status;" \
  "Java and TypeScript, conformance, leader loss, example: exit $third_status"
# What failed, last: a reader of the end of this output sees each failure's first line.
echo "== what failed:"
grep -hE '^(FAILED |ERROR |HANG: )' "$second_log" "$first_log" "$third_log" || echo "nothing"
exit $((second != 0 || first_status != 0 || third_status != 0))
