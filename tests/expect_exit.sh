#!/bin/sh
# Runs COMMAND, passing its output through, and checks its exit status: a test that matches its
# output with PASS_REGULAR_EXPRESSION has CTest ignore the status, so a command that printed the
# right message and then crashed (or exited 0 on bad input) would pass. On a wrong status this
# prints a line that the test's FAIL_REGULAR_EXPRESSION ("expect-exit: FAIL") catches.
# Usage: expect_exit.sh EXPECTED COMMAND...
expected=$1
shift
"$@"
code=$?
if [ "$code" -ne "$expected" ]; then
  echo "expect-exit: FAIL: exit status $code, expected $expected"
  exit 1
fi
