#!/bin/sh
# Checks that every public function of a header has a contract block
# (include/hetex.h, "Contracts"): the comment right above its declaration,
# or above the run of declarations it belongs to, holds the labelled lines
# "Fails:", "On failure:" (left out after "Fails: never"), "Ownership:" and
# "Threads:". A function declared without HX_API fails too. Prints each
# offender as FILE:LINE: NAME: what is missing, and exits 1 if there is one.
#   .ci/check_contracts.sh [HEADER]        (default: include/hetex.h)
#   .ci/check_contracts.sh --self-test [HEADER]
#       also plants an undocumented function, a block without its Threads
#       line and a declaration without HX_API into copies of HEADER and
#       fails unless the check catches each one.
set -eu
cd "$(dirname "$0")/.."

check() { # header
  awk -v file="$1" '
    function labels(text,    miss) {
      miss = ""
      if (text !~ /\* +Fails:/) miss = miss " Fails:"
      else if (text !~ /\* +Fails: +never/ && text !~ /\* +On failure:/) miss = miss " On failure:"
      if (text !~ /\* +Ownership:/) miss = miss " Ownership:"
      if (text !~ /\* +Threads:/) miss = miss " Threads:"
      return miss
    }
    function report(name, msg) { printf "%s:%d: %s: %s\n", file, NR, name, msg; bad++ }
    # A comment: collected until its end; it attaches to the declarations
    # that follow it directly (no blank line, nothing else between).
    incomment {
      text = text "\n" $0
      if ($0 ~ /\*\//) { incomment = 0; attached = text }
      next
    }
    /^[ \t]*\/\*/ {
      text = $0
      if ($0 ~ /\*\//) attached = text
      else incomment = 1
      next
    }
    indecl { if ($0 ~ /;/) indecl = 0; next }
    /^HX_API / {
      line = $0
      sub(/\(.*/, "", line)
      n = split(line, w, /[ \t*]+/)
      name = w[n]
      total++
      if (attached == "") report(name, "no contract block above the declaration")
      else {
        miss = labels(attached)
        if (miss != "") report(name, "the contract block lacks" miss)
      }
      if ($0 !~ /;/) indecl = 1
      next
    }
    # A function declared without HX_API: a type, then hx_name( at the
    # start of a line (not a macro, typedef or struct member).
    /^[a-z][a-z_0-9 ]*[ *]hx_[a-z_0-9]+\(/ && $0 !~ /^(typedef|static|#)/ {
      line = $0
      sub(/\(.*/, "", line)
      n = split(line, w, /[ \t*]+/)
      report(w[n], "declared without HX_API")
    }
    { attached = "" }
    END {
      if (total == 0) { printf "%s: no HX_API function found\n", file; exit 1 }
      if (bad) { printf "%s: %d of %d public functions lack a complete contract block\n", file, bad, total; exit 1 }
      printf "%s: %d public functions, each with its contract block\n", file, total
    }' "$1"
}

self_test() { # header
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  check "$1"
  # Each plant goes right before the header's closing extern "C" brace.
  plant() { # name, text
    awk -v text="$2" '/^#ifdef __cplusplus/ && seen { print text } /^#ifdef __cplusplus/ { seen = 1 } { print }' \
      "$1" > "$tmp/$name.h"
  }
  name=undocumented
  plant "$1" "HX_API hx_status hx_planted_undocumented(int x);"
  name=no_threads
  plant "$1" "/* Planted.
 *   Fails:      never.
 *   Ownership:  none.
 */
HX_API int hx_planted_no_threads(void);"
  name=no_api
  plant "$1" "/* Planted.
 *   Fails:      never.
 *   Ownership:  none.
 *   Threads:    any thread.
 */
int hx_planted_no_api(void);"
  for name in undocumented no_threads no_api; do
    if out=$(check "$tmp/$name.h"); then
      echo "self-test: the check passed a header with a planted $name function" >&2
      exit 1
    fi
    echo "$out" | grep -q "hx_planted_$name" ||
      { echo "self-test: the check did not name hx_planted_$name:" >&2; echo "$out" >&2; exit 1; }
    echo "self-test: planted $name caught: $(echo "$out" | grep "hx_planted_$name")"
  done
}

if [ "${1:-}" = --self-test ]; then
  self_test "${2:-include/hetex.h}"
else
  check "${1:-include/hetex.h}"
fi
