#!/bin/sh
# A deadlock between live ranks ends the job: HEXISEQ_TEST_STALL=RANK:PHASE makes that rank wait
# forever for a message nobody sends when it enters PHASE; the other ranks then block in their
# next collective. Every rank's watchdog must report the deadlock (naming the rank behind and its
# phase), the job must exit non-zero, and well before the outer `timeout`.
# Usage: watchdog_deadlock.sh RANK PHASE NP EXPECTED -- COMMAND...   (COMMAND runs under mpirun)
# With WATCHDOG_STALL=compute the rank computes forever instead, and every rank must report a
# stuck computation.
rank=$1 phase=$2 np=$3 expected=$4
shift 5
report="while every rank is alive and waiting in communication (a deadlock)"
stall="$rank:$phase"
if [ "${WATCHDOG_STALL:-}" = compute ]; then
  report="computes in phase $phase and every other rank waits in communication"
  stall="$rank:$phase:compute"
fi
start=$(date +%s)
out=$(HEXISEQ_TEST_STALL="$stall" timeout 120 mpirun --allow-run-as-root --oversubscribe \
      -x HEXISEQ_TEST_STALL -np "$np" "$@" 2>&1)
code=$?
echo "$out"
reports=$(echo "$out" | grep -c -- "$report")
echo "exit $code after $(( $(date +%s) - start )) s; $reports of $np ranks reported the stall"
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] || { echo "watchdog-deadlock: FAIL (exit $code)"; exit 1; }
[ "$reports" -eq "$np" ] || { echo "watchdog-deadlock: FAIL (not every rank reported)"; exit 1; }
echo "$out" | grep -q -- "$expected" || { echo "watchdog-deadlock: FAIL (no '$expected')"; exit 1; }
echo "watchdog-deadlock: PASS"
