#!/bin/sh
# The runner's rules (tests/util/test_main.h), on harness_probe: a case or a
# program that checked nothing fails, a skip exits 77, --list names the
# cases, --case picks them, a bad name or flag exits 2 saying which.
# Usage: test_harness.sh PATH/TO/harness_probe
probe=$1
failed=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# expect WHAT CODE TEXT ARGS...: the probe with ARGS exits CODE and prints
# TEXT (stdout or stderr; "" for any).
expect() {
  what=$1 code=$2 text=$3
  shift 3
  "$probe" "$@" >"$out" 2>"$err"
  rc=$?
  if [ "$rc" -ne "$code" ] || ! cat "$out" "$err" | grep -qF -- "$text"; then
    echo "FAIL $what: exit $rc (want $code), want the text '$text' in:"
    cat "$out" "$err"
    failed=1
  else
    echo "ok   $what"
  fi
}

expect "a case that checks passes" 0 "harness_probe/checks: 1 checks, 0 failed" --case checks
expect "a case asked for by name that checks nothing fails" 1 "ran no check" --case checks_nothing
expect "a program with a case that checks nothing fails" 1 "ran no check"
expect "a skipped case exits 77" 77 "skipped (nothing to run here)" --case skips
expect "a skip beside a passing case passes" 0 "1 passed, 0 failed" --case skips --case checks
expect "--list names every case" 0 "checks_nothing" --list
expect "an unknown case exits 2 with the list" 2 "no case named 'bogus'" --case bogus
expect "--case without a name exits 2" 2 "the cases are:" --case
expect "an unknown flag exits 2 naming it" 2 "unknown flag --bogus" --bogus
expect "--help shows the usage" 0 "--case NAME" --help
exit $failed
