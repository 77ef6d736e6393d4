#!/usr/bin/env bash
# hetex build driver.
#   ./build.sh                 build (Release) into build/
#   ./build.sh test [ARGS]     build and run the test suite but the gpu tests (ctest
#                              ARGS: -L sched, -R NAME, ...; labels: docs/testing.md)
#   ./build.sh run             the main job: wide & deep on data/adult (hetex widedeep)
#   ./build.sh bench [NAME]    run one benchmark (JSON lines on stdout); no NAME: list them
#   ./build.sh plot [METRICS...]  no METRICS: draw every benchmark result bench/results/
#                              *.json into bench/results/plots/ and link each PNG from the
#                              results' .md; else each --metrics file of a training run
#                              as METRICS.png (hetex plot, through gnuplot)
#   ./build.sh install --prefix DIR
#   ./build.sh sanitize [address,undefined|thread] [ARGS]   test suite in a sanitizer
#                              build (thread: the tests labelled sched and tsan)
#   ./build.sh arrows          check the includes against docs/arrows.txt and redraw
#                              docs/architecture.dot (and .svg where Graphviz is)
#   ./build.sh fuzz NAME|all SECONDS   run fuzz target tests/fuzz/fuzz_NAME.c (all: each
#                              in turn) for SECONDS under libFuzzer with ASan+UBSan
#                              (clang, build-fuzz/); a finding fails with its input
#                              in build-fuzz/artifacts/
#   ./build.sh fuzz-seeds      rewrite the seed corpora tests/fuzz/corpus/ (files hetex
#                              writes for the targets' models; the sharded checkpoints
#                              under mpirun -np 2)
# CC picks the compiler (cmake's default: cc); with another one than cc or gcc
# the build folders are named after it (CC=clang: build-clang/,
# build-clang-address-undefined/), so both builds live side by side.
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD
jobs=$(nproc 2>/dev/null || echo 2)

# Debian packages the build needs, by the file that proves each is there.
need_pkgs() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v cc >/dev/null || missing+=(gcc)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  [ -e /usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h ] || [ -e /usr/include/openblas/cblas.h ] ||
    missing+=(libopenblas-openmp-dev)
  [ -e /usr/include/xxhash.h ] || missing+=(libxxhash-dev)
  [ -e /usr/include/liburing.h ] || missing+=(liburing-dev)
  [ -e /usr/include/libaio.h ] || missing+=(libaio-dev)
  [ -e /usr/lib/x86_64-linux-gnu/libgomp.so.1 ] || missing+=(libgomp1)
  # oneDNN: bf16 GEMM tiles with AMX / AVX512-BF16 (optional to CMake; bf16 is widened without it)
  [ -e /usr/include/oneapi/dnnl/dnnl.h ] || missing+=(libdnnl-dev)
  # Open MPI: the communicators (dist/) and the tests labelled mpi
  command -v mpirun >/dev/null || missing+=(openmpi-bin)
  [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || missing+=(libopenmpi-dev)
  # ip: mpi_netns_tcp's two network namespaces (it skips, saying why, where they cannot be made)
  command -v ip >/dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
  # hetex plot and widedeep --curve draw PNGs through gnuplot
  command -v gnuplot >/dev/null || missing+=(gnuplot-nox)
  # --tensorboard's event files: protobuf-c encodes them
  [ -e /usr/include/protobuf-c/protobuf-c.h ] || missing+=(libprotobuf-c-dev)
  command -v protoc-c >/dev/null || missing+=(protobuf-c-compiler)
  if [[ "$cc_name" == clang* ]] || [ "${1:-}" = fuzz ]; then
    command -v clang >/dev/null || missing+=(clang)
    # clang's OpenMP runtime and, for the fuzz targets, libFuzzer
    [ -e /usr/lib/llvm-14/lib/libomp.so ] || missing+=(libomp-14-dev)
    [ "${1:-}" != fuzz ] || ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
      missing+=(libclang-rt-14-dev)
  fi
  echo "${missing[@]:-}"
}

ensure_deps() { # [fuzz]
  local missing
  missing=$(need_pkgs "${1:-}")
  [ -z "$missing" ] && return 0
  echo "build.sh: installing missing Debian packages: $missing" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo -n"
  if command -v apt-get >/dev/null &&
     { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing; } >&2; then
    return 0
  fi
  echo "build.sh: could not install: $missing. Install them with: apt-get install $missing" >&2
  exit 1
}

configure() { # dir, extra cmake args... (quiet; cmake's output when it fails)
  local dir=$1 log; shift
  if ! log=$(cmake -S "$root" -B "$dir" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" "$@" 2>&1); then
    printf '%s\n' "$log" >&2
    echo "build.sh: cmake could not configure $dir (its output is above)" >&2
    exit 1
  fi
}

build() { # dir, extra cmake args...
  local dir=$1; shift
  ensure_deps
  configure "$dir" "$@"
  cmake --build "$dir" -j "$jobs"
}

# The names of the tests labelled $2 in the configured build folder $1.
tests_labelled() { (cd "$1" && ctest -N -L "$2") | sed -n 's/^ *Test *#[0-9]*: //p'; }

# ThreadSanitizer runs the tests labelled sched (the concurrent executor:
# streams, host lanes, the memory plan under concurrency) and tsan (server
# mode under mpirun: a server's loop beside the workers' sessions); the rest
# of the suite has no threads of ours. OMP_THREAD_LIMIT=1 keeps OpenMP (kernels,
# OpenBLAS) on the calling thread: libgomp is not instrumented, so its
# barriers would show as races. Function entry/exit is not instrumented
# either (reports show the racing frame only): the embedding kernels'
# target_clones resolvers run before TSan starts and would crash in that
# instrumentation.

# The fuzz targets' build (clang, ASan+UBSan, libFuzzer coverage) and a run
# of target $1 for $2 seconds: new inputs go to build-fuzz/corpus/$1 (the
# seeds in tests/fuzz/corpus/$1 are read, not written), a finding to
# build-fuzz/artifacts/. libFuzzer's last lines give execs, cov and ft.
fuzz_build() {
  ensure_deps fuzz
  CC=clang configure build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHX_SANITIZE=address,undefined -DHX_FUZZ=ON -DHX_CUDA=OFF
  cmake --build build-fuzz -j "$jobs" --target "$@"
}

fuzz_run() { # name seconds
  local name=$1 secs=$2 work=build-fuzz/corpus/$1
  mkdir -p "$work" build-fuzz/artifacts build-fuzz/tmp
  echo "build.sh fuzz: fuzz_$name for $secs s" >&2
  # OMP_NUM_THREADS=1: one core per target; detect_leaks: as ./build.sh sanitize
  OMP_NUM_THREADS=1 TMPDIR=$root/build-fuzz/tmp ASAN_OPTIONS=detect_leaks=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/fuzz_$name" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-" "$work" "tests/fuzz/corpus/$name"
}

# Targets $2... for $1 seconds each, $jobs at a time (each is one thread:
# the 2 cores of CI fuzz two at once); each one's output is printed whole
# when it ends, and the run fails naming every target that found something.
fuzz_all() { # seconds names...
  local secs=$1 n failed="" logs=build-fuzz/logs
  shift
  mkdir -p "$logs"
  local -a names=("$@") pids=()
  local i=0 running=0
  for n in "${names[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      fuzz_collect "${names[i]}" "${pids[i]}" || failed="$failed ${names[i]}"
      i=$((i + 1)) running=$((running - 1))
    fi
    fuzz_run "$n" "$secs" >"$logs/$n.log" 2>&1 &
    pids+=($!) running=$((running + 1))
  done
  for (( ; i < ${#names[@]}; i++)); do
    fuzz_collect "${names[i]}" "${pids[i]}" || failed="$failed ${names[i]}"
  done
  [ -z "$failed" ] || { echo "build.sh fuzz: a finding in:$failed (inputs in build-fuzz/artifacts/)" >&2; return 1; }
}

fuzz_collect() { # name pid: wait for it, print its log
  local rc=0
  wait "$2" || rc=$?
  cat "build-fuzz/logs/$1.log"
  return "$rc"
}

# Build folders: build/ for cc or gcc, build-<compiler>/ for another CC.
cc_name=$(basename "${CC:-cc}")
case "$cc_name" in cc|gcc) bdir=build ;; *) bdir=build-$cc_name ;; esac

# The benchmarks, one line each: the first sentence (up to a '.', ':' or
# ';') of bench/bench_NAME.c's opening comment.
list_benches() {
  echo "benchmarks: ./build.sh bench NAME [ARGS] (JSON lines on stdout; recorded in bench/results/)"
  local f name line
  for f in bench/bench_*.c; do
    name=${f#bench/bench_}
    name=${name%.c}
    line=$(awk 'NR > 4 { exit } { sub(/^\/\* */, ""); sub(/^ *\* */, ""); sub(/ *\*\/.*/, "");
                 printf "%s ", $0 }' "$f" | sed 's/[.:;] .*//; s/ *$//')
    printf '  %-10s %.100s\n' "$name" "$line"
  done
  echo "  gpt-peer   hetex gpt against the same model in PyTorch on the CPU, interleaved (bench/gpt_peer.sh)"
}

# Every bench/results/*.json and *.jsonl drawn (hetex plot --bench) into
# bench/results/plots/; a PNG no .md there links yet gets a line in the .md
# of its results file's name (the others are linked by hand from the .md
# that discusses them).
plot_benches() {
  local out=bench/results/plots f png stem md
  mkdir -p "$out"
  for f in bench/results/*.json bench/results/*.jsonl; do
    [ -e "$f" ] || continue
    "$bdir/hetex" plot --bench "$f" --output-dir "$out" >"$out/.made" || { rm -f "$out/.made"; exit 1; }
    stem=$(basename "${f%.jsonl}" .json)
    sed -n "s|^hetex plot: '$out/\(.*\.png\)': .*|\1|p" "$out/.made" | while read -r png; do
      md=bench/results/$stem.md
      if grep -qF "(plots/$png)" bench/results/*.md; then continue; fi
      if [ -f "$md" ]; then
        printf '\n![%s, drawn by ./build.sh plot](plots/%s)\n' "${png%.png}" "$png" >>"$md"
        echo "build.sh plot: linked plots/$png from $md"
      else
        echo "build.sh plot: plots/$png: no $md; link it from the .md that discusses $f" >&2
      fi
    done
    cat "$out/.made"
  done
  rm -f "$out/.made"
}

cmd=${1:-build}
[ $# -gt 0 ] && shift
case "$cmd" in
  build) build "$bdir" -DCMAKE_BUILD_TYPE=Release ;;
  test)
    build "$bdir" -DCMAKE_BUILD_TYPE=Release
    cd "$bdir" && ctest --output-on-failure -j "$jobs" -LE gpu "$@" ;;
  fuzz)
    name=${1:?usage: ./build.sh fuzz NAME|all SECONDS}
    secs=${2:?usage: ./build.sh fuzz NAME|all SECONDS}
    names=$name
    [ "$name" = all ] && names=$(ls tests/fuzz/fuzz_*.c | sed -n 's|.*/fuzz_\(.*\)\.c$|\1|p' | grep -vx common)
    for n in $names; do
      [ -e "tests/fuzz/fuzz_$n.c" ] || { echo "build.sh: no fuzz target '$n' (tests/fuzz/fuzz_$n.c)" >&2; exit 2; }
    done
    fuzz_build $(for n in $names; do echo "fuzz_$n"; done)
    fuzz_all "$secs" $names ;;
  fuzz-seeds)
    fuzz_build fuzz_seeds
    mkdir -p build-fuzz/tmp
    ASAN_OPTIONS=detect_leaks=1 TMPDIR=$root/build-fuzz/tmp build-fuzz/fuzz_seeds
    # fuzz_zero_load's sharded checkpoints, saved by 2 ranks (Open MPI's
    # leaks past MPI_Finalize suppressed as for the tests labelled mpi)
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mca_base_component_disable_dlclose=1 \
      ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$root/tests/mpi/lsan.supp \
      TMPDIR=$root/build-fuzz/tmp mpirun --oversubscribe -np 2 build-fuzz/fuzz_seeds zero ;;
  sanitize)
    san=${1:-address,undefined}
    dir=$bdir-$(echo "$san" | tr ',' '-')
    shift || true
    if [ "$san" = thread ]; then
      ensure_deps
      # timeouts x10: TSan runs these tests 5-15x slower than Release
      configure "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHX_SANITIZE="$san" \
        -DHX_TEST_TIMEOUT_SCALE=10 "-DCMAKE_C_FLAGS=--param=tsan-instrument-func-entry-exit=0"
      # (a test is its target, but an MPI test mpi_X_npN or mpi_X_npN_VARIANT, which runs target mpi_X)
      cmake --build "$dir" -j "$jobs" --target $(tests_labelled "$dir" 'sched|tsan' | sed -E 's/_np[0-9]+(_[a-z0-9_]+)?$//' | sort -u)
      set -- -L 'sched|tsan' "$@"
      export OMP_THREAD_LIMIT=1 # only here (OpenBLAS's own threading spins forever under it; gemm.c keeps OpenBLAS on one thread)
    else
      # timeouts x4: ASan and UBSan run the tests 2-4x slower than Release;
      # no benchmarks or example programs (no test runs them; the Release build compiles them)
      build "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHX_SANITIZE="$san" -DHX_TEST_TIMEOUT_SCALE=4 \
        -DHX_BUILD_PROGRAMS=OFF
    fi
    # OpenBLAS/libgomp keep thread pools that LeakSanitizer cannot see into.
    cd "$dir" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      TSAN_OPTIONS="halt_on_error=1 suppressions=$root/tests/tsan.supp" \
      HX_TEST_SANITIZER="$san" ctest --output-on-failure -j "$jobs" -LE 'gpu|install' "$@" ;;
  run) # wide & deep on UCI Adult: host embeddings beside a device MLP
    build "$bdir" -DCMAKE_BUILD_TYPE=Release >/dev/null
    exec "$bdir/hetex" widedeep --data data/adult "$@" ;;
  bench)
    if [ $# -eq 0 ]; then list_benches; exit 0; fi
    name=$1
    shift
    script=bench/${name//-/_}.sh # a peer benchmark: a script around the CLI
    if [ ! -f "bench/bench_$name.c" ] && { [[ $name != *-* ]] || [ ! -f "$script" ]; }; then
      echo "build.sh: no benchmark '$name' (no bench/bench_$name.c)" >&2
      list_benches >&2
      exit 2
    fi
    build "$bdir" -DCMAKE_BUILD_TYPE=Release >/dev/null
    [ -f "bench/bench_$name.c" ] || HETEX="$bdir/hetex" exec bash "$script" "$@"
    exec "$bdir/bench_$name" "$@" ;;
  plot)
    build "$bdir" -DCMAKE_BUILD_TYPE=Release >/dev/null
    [ $# -gt 0 ] || { plot_benches; exit 0; }
    for f in "$@"; do "$bdir/hetex" plot "$f"; done ;;
  install)
    prefix=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        *) echo "build.sh install: unknown option $1" >&2; exit 2 ;;
      esac
    done
    [ -n "$prefix" ] || { echo "usage: ./build.sh install --prefix DIR" >&2; exit 2; }
    build "$bdir" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --install "$bdir" --prefix "$prefix" ;;
  arrows) # the picture from the code first: it shows a breach in red
    .ci/check_arrows.sh --dot >docs/architecture.dot
    if command -v dot >/dev/null; then
      dot -Tsvg docs/architecture.dot >docs/architecture.svg
    else
      echo "build.sh: no Graphviz 'dot' (apt-get install graphviz): docs/architecture.svg not redrawn" >&2
    fi
    exec .ci/check_arrows.sh ;;
  *) echo "usage: ./build.sh [build|test|run|bench [NAME]|plot [METRICS...]|install --prefix DIR|sanitize [KIND]|arrows|fuzz NAME|all SECONDS|fuzz-seeds]" >&2; exit 2 ;;
esac
