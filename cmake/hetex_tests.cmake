# The test table: every ctest's labels and timeout, in one place. Included
# by CMakeLists.txt after every test is defined; a test without a row here
# stops the configure. docs/testing.md says what each label means.
#
# Timeouts are about 5-10x the test's time in a Release build on 2 cores
# (at least 30 s). Sanitizer builds are slower: HX_TEST_TIMEOUT_SCALE
# multiplies every timeout (./build.sh sanitize sets it).
set(HX_TEST_TIMEOUT_SCALE 1 CACHE STRING
    "Multiplies every test timeout (a whole number; slower builds: sanitizers)")

set(HX_TEST_ROWS "")
# hx_test(NAME TIMEOUT LABEL...): the row of test NAME (a test not built in
# this configuration, such as tests/gpu without CUDA, is passed over).
function(hx_test name timeout)
  set(HX_TEST_ROWS ${HX_TEST_ROWS} ${name} PARENT_SCOPE)
  if(NOT TEST ${name})
    return()
  endif()
  math(EXPR scaled "${timeout} * ${HX_TEST_TIMEOUT_SCALE}")
  # 77: the runner's "every case skipped" (tests/util/test_main.h)
  set_tests_properties(${name} PROPERTIES LABELS "${ARGN}" TIMEOUT ${scaled}
                       SKIP_RETURN_CODE 77)
endfunction()

# Release times on 2 shared cores (ctest -j1, 2026-11-26): test_optim 33 s,
# test_offload_disk 25 s, test_backend_ops 16 s, test_random_graphs 14 s,
# test_offload 13 s, test_gpt 5 s, install 42 s, test_cli_checkpoint 8 s,
# test_cli_runs 8 s, test_cli 6 s (a few dozen runs of the hetex binary
# each, 0.15-0.5 s apiece), every other under 3.5 s.
# tests/gpu: 120 s, tests/gpu/run_on_gpu.sh's limit per program.
#       name                     timeout  labels
hx_test(test_harness             30       unit)
hx_test(test_arrows              30       unit)
hx_test(contracts                30       unit)
hx_test(install                  300      install)
hx_test(symbols                  30       install)
hx_test(readme                   60       install)

hx_test(test_activation_offload  30       sched)
hx_test(test_auto_disk           30       sched io)
hx_test(test_autoplace           60       sched)
hx_test(test_backend_ops         120      slow)
hx_test(test_chunks              30       unit)
hx_test(test_cli                 60       io)
hx_test(test_cli_checkpoint      90       io)
hx_test(test_cli_runs            90       io)
hx_test(test_cli_resume          90       io)
hx_test(test_cli_metrics         60       io)
hx_test(test_cli_partial         60       io)
hx_test(test_plot_bench          120      io)
hx_test(test_concurrency         30       sched)
hx_test(test_conv                30       unit io)
hx_test(test_cuda_absent         30       unit)
hx_test(test_device_pools        30       unit)
hx_test(test_disk_tier           30       io)
hx_test(test_dist                30       unit mpi)
hx_test(test_dpu                 30       sched io)
hx_test(test_embedding           30       unit embedding)
hx_test(test_embedding_dynamic   30       unit embedding)
hx_test(test_embedding_graph     30       embedding)
hx_test(test_embedding_io        30       io embedding)
hx_test(test_embedding_optim     30       unit embedding)
hx_test(test_embedding_semantics 30       unit embedding)
hx_test(test_embedding_ssd       30       io embedding)
hx_test(test_errors              30       unit)
hx_test(test_features            30       unit)
hx_test(test_gpt                 60       sched)
hx_test(test_grad_buckets        30       sched)
hx_test(test_graph_lifetime      30       unit)
hx_test(test_half_ops            30       unit)
hx_test(test_kernels             30       unit)
hx_test(test_memtrace            30       io)
hx_test(test_mixed_precision     30       sched)
hx_test(test_numerics            30       unit embedding)
hx_test(test_offload             100      sched slow)
hx_test(test_offload_disk        200      sched io slow)
hx_test(test_ops                 30       unit)
hx_test(test_optim               240      slow)
hx_test(test_partition           30       sched)
hx_test(test_persistent_rw       30       unit)
hx_test(test_placement           30       sched)
hx_test(test_pool                30       unit)
hx_test(test_random_graphs       120      sched slow)
hx_test(test_recompute           30       sched)
hx_test(test_resnet              60       sched io)
hx_test(test_reader              30       io)
hx_test(test_staged_save         60       io)
hx_test(test_session_threads     30       sched)
hx_test(test_trace               30       sched)
hx_test(test_train               30       sched)
hx_test(test_train_schedule      30       unit)
hx_test(test_train_state         30       sched io)
hx_test(test_update_status       30       unit)
hx_test(test_update_trace        30       sched io)
hx_test(test_vmath               60       unit)
hx_test(test_widedeep            30       io embedding)

hx_test(test_gpu_backend         120      gpu)
hx_test(test_gpu_backend_ops     120      gpu)
hx_test(test_gpu_kernels         120      gpu)
hx_test(test_gpu_nccl            120      gpu mpi)

# tests/mpi (cmake/hetex_mpi_tests.cmake): 1-2 s each under mpirun
hx_test(mpi_collectives_np1      30       mpi)
hx_test(mpi_collectives_np2      30       mpi)
hx_test(mpi_collectives_np4      60       mpi)
hx_test(mpi_collectives_user     60       mpi)
hx_test(mpi_transports           60       mpi)
hx_test(mpi_ddp_np2              60       mpi)
hx_test(mpi_ddp_transports       90       mpi)
hx_test(mpi_killed_rank          90       mpi)
hx_test(mpi_gpt_zero             90       mpi io)
hx_test(mpi_zero_np1             60       mpi)
hx_test(mpi_zero_np2             90       mpi)
hx_test(mpi_zero_np4             120      mpi)
hx_test(mpi_shard_np1            30       mpi)
hx_test(mpi_shard_np2            60       mpi)
hx_test(mpi_shard_np4            90       mpi)
hx_test(mpi_shard_transports     90       mpi)
hx_test(mpi_widedeep_shards      180      mpi io)
hx_test(mpi_shard_killed_rank    90       mpi)

get_property(hx_all_tests DIRECTORY PROPERTY TESTS)
foreach(name ${hx_all_tests})
  if(NOT name IN_LIST HX_TEST_ROWS)
    message(FATAL_ERROR "test ${name} has no row in cmake/hetex_tests.cmake (its labels and timeout)")
  endif()
endforeach()
