# MPI tests (tests/mpi/), included by CMakeLists.txt after the tests are
# defined; built where MPI is (cmake/hetex_dist.cmake). Each runs a program
# under mpirun --oversubscribe (CI's 2 cores take 4 ranks), as root where
# CI is root (OMPI_ALLOW_RUN_AS_ROOT); cmake/hetex_tests.cmake gives them
# the label mpi and their timeouts.
set(HX_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
# Under ASan: what Open MPI keeps past MPI_Finalize is not ours to find
# (tests/mpi/lsan.supp); its components stay loaded and the slow unwinder
# runs, so that the leaks' stacks reach the libraries named there.
if(HX_SANITIZE MATCHES "address")
  list(APPEND HX_MPI_ENV "OMPI_MCA_mca_base_component_disable_dlclose=1"
       "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0"
       "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/mpi/lsan.supp")
endif()
# tests/test_dist.c: a communicator outside mpirun, or the no-MPI error
set_property(TEST test_dist APPEND PROPERTY ENVIRONMENT "HX_TEST_MPI=${HX_HAVE_MPI};${HX_MPI_ENV}")
if(HX_HAVE_MPI)
  add_executable(mpi_collectives ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_collectives.c)
  target_link_libraries(mpi_collectives PRIVATE hx_testlib MPI::MPI_C)
  foreach(np 1 2 4)
    add_test(NAME mpi_collectives_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:mpi_collectives>)
  endforeach()
  # the program's own MPI and a communicator it split (ranks reversed)
  add_test(NAME mpi_collectives_user
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 3 $<TARGET_FILE:mpi_collectives> --user-mpi)
  # the same results over shared memory and over TCP
  add_test(NAME mpi_transports COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/same_over_tcp.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_collectives> 3)
  # data parallel (ZeRO stage 0) against one rank alone; the same bits over
  # shared memory, again, and over TCP
  add_executable(mpi_ddp ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_ddp.c)
  target_link_libraries(mpi_ddp PRIVATE hx_testlib)
  add_test(NAME mpi_ddp_np2 COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:mpi_ddp>)
  add_test(NAME mpi_ddp_transports COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/same_over_tcp.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_ddp> 3)
  # ZeRO stages 1 and 2 bitwise against stage 0 (tests/mpi/mpi_zero.c)
  add_executable(mpi_zero ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_zero.c ${HX_EXAMPLE_SOURCES_gpt})
  target_include_directories(mpi_zero PRIVATE ${PROJECT_SOURCE_DIR}/examples/gpt)
  target_link_libraries(mpi_zero PRIVATE hx_testlib)
  foreach(np 1 2 4)
    add_test(NAME mpi_zero_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:mpi_zero>)
  endforeach()
  # stages 1, 2 and 3 (the GPT in bf16, the f32 MLP): the same bits over
  # shared memory, again, and over TCP
  add_test(NAME mpi_zero_transports COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/same_over_tcp.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_zero> 2 --case gpt_host_stage1 --case gpt_host_stage2
           --case gpt_host_stage3 --case mlp_cpu)
  # the bytes each rank sends per step against the minimum (tests/mpi/mpi_zero_bytes.c)
  add_executable(mpi_zero_bytes ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_zero_bytes.c ${HX_EXAMPLE_SOURCES_gpt})
  target_include_directories(mpi_zero_bytes PRIVATE ${PROJECT_SOURCE_DIR}/examples/gpt)
  target_link_libraries(mpi_zero_bytes PRIVATE hx_testlib)
  foreach(np 1 2 4)
    add_test(NAME mpi_zero_bytes_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:mpi_zero_bytes>)
  endforeach()
  # the gradient sums start during the backward (tests/mpi/mpi_zero_overlap.c)
  add_executable(mpi_zero_overlap ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_zero_overlap.c)
  target_link_libraries(mpi_zero_overlap PRIVATE hx_testlib)
  foreach(np 2 4)
    add_test(NAME mpi_zero_overlap_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:mpi_zero_overlap>)
  endforeach()
  # the host update threads pinned to cores, each rank to its own (tests/mpi/mpi_pin.c)
  add_executable(mpi_pin ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_pin.c)
  target_link_libraries(mpi_pin PRIVATE hx_testlib MPI::MPI_C)
  # (mpirun binds each rank to a core of its own by default: np 1 unbound
  # has both cores, np 2 the ranks share them or keep mpirun's)
  add_test(NAME mpi_pin_np1 COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none -np 1 $<TARGET_FILE:mpi_pin>)
  add_test(NAME mpi_pin_np2 COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:mpi_pin>)
  add_test(NAME mpi_pin_np2_unbound COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none -np 2 $<TARGET_FILE:mpi_pin>)
  # sharded ZeRO checkpoints: saved at 4 ranks, loaded at 4, 2 and 1 (no
  # MPI), damaged shards refused, jobs killed mid-save (tests/mpi/zero_ckpt.sh)
  add_executable(mpi_zero_ckpt ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_zero_ckpt.c ${HX_EXAMPLE_SOURCES_gpt})
  target_include_directories(mpi_zero_ckpt PRIVATE ${PROJECT_SOURCE_DIR}/examples/gpt)
  target_link_libraries(mpi_zero_ckpt PRIVATE hx_testlib)
  add_test(NAME mpi_zero_ckpt COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/zero_ckpt.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_zero_ckpt>)
  # a rank SIGKILLed mid-training: the others end within the timeout naming it
  add_executable(mpi_killed ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_killed.c)
  target_link_libraries(mpi_killed PRIVATE hx_testlib)
  # mode midstep: the program's hook around the library's reduce-scatter (tests/mpi/mpi_killed.c)
  target_link_options(mpi_killed PRIVATE -Wl,--wrap=hx__comm_reduce_scatter_v)
  add_test(NAME mpi_killed_rank COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/killed_rank.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_killed> 3)
  # ZeRO stage 2: a rank stopped before its all-gathers; the others' next call names it
  add_test(NAME mpi_killed_deferred COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/killed_rank.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_killed> 2 deferred)
  # ZeRO stage 2: a rank SIGKILLed in the backward after posting a reduce-scatter; the others end naming it
  add_test(NAME mpi_killed_midstep COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/killed_rank.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_killed> 3 midstep)
  # mpirun -np 2 hetex gpt --zero 0
  add_test(NAME mpi_gpt_zero COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/gpt_zero.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli>)
  # hetex gpt --zero 2 --save / --resume at 4, 2 and 1 ranks (sharded checkpoints)
  add_test(NAME mpi_gpt_zero_ckpt COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/gpt_zero_ckpt.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli>)
  # sharded embedding tables (collective mode) against one rank alone; the
  # same bits over shared memory, again, and over TCP
  add_executable(mpi_shard ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_shard.c)
  target_link_libraries(mpi_shard PRIVATE hx_testlib MPI::MPI_C)
  foreach(np 1 2 4)
    add_test(NAME mpi_shard_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:mpi_shard>)
    set_tests_properties(mpi_shard_np${np} PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  endforeach()
  add_test(NAME mpi_shard_transports COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/same_over_tcp.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_shard> 2)
  set_tests_properties(mpi_shard_transports PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  # a rank killed mid-training with sharded tables: the others end naming it
  add_executable(mpi_shard_killed ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_shard_killed.c)
  target_link_libraries(mpi_shard_killed PRIVATE hx_testlib)
  add_test(NAME mpi_shard_killed_rank COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/killed_rank.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_shard_killed> 3)
  set_tests_properties(mpi_shard_killed_rank PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  # server mode (hx_ps): synchronous against collective mode and one
  # process, the staleness bound, an id out of range, the servers' save
  add_executable(mpi_ps ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_ps.c)
  target_link_libraries(mpi_ps PRIVATE hx_testlib)
  foreach(np 2 3 4)
    add_test(NAME mpi_ps_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:mpi_ps>)
    set_tests_properties(mpi_ps_np${np} PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  endforeach()
  # mpirun -np 2 hetex widedeep --shards 2: Adult scored as by one process
  add_test(NAME mpi_widedeep_shards COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/widedeep_shards.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli> ${PROJECT_SOURCE_DIR}/data/adult)
  set_tests_properties(mpi_widedeep_shards PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  # server mode with a server or a worker (devcache: one worker with a device cache) SIGKILLed mid-training
  add_executable(mpi_ps_killed ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_ps_killed.c)
  target_link_libraries(mpi_ps_killed PRIVATE hx_testlib)
  foreach(mode server worker devcache)
    add_test(NAME mpi_ps_killed_${mode} COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/ps_killed.sh
             ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_ps_killed> ${mode})
    set_tests_properties(mpi_ps_killed_${mode} PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  endforeach()
  # mpirun -np 3 hetex widedeep --servers 1 (and --staleness 4): Adult
  # scored as by one process
  add_test(NAME mpi_widedeep_servers COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/widedeep_servers.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli> ${PROJECT_SOURCE_DIR}/data/adult)
  set_tests_properties(mpi_widedeep_servers PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  # hetex widedeep --criteo-generate with tables over a per-rank cap: one
  # rank refused, --shards 2 and --servers 2 train alike under it
  add_test(NAME mpi_widedeep_criteo COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/widedeep_criteo.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli>)
  set_tests_properties(mpi_widedeep_criteo PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  # hetex widedeep --save/--resume with --shards and --servers: a checkpoint
  # of either mode resumed at other rank counts, in the other mode and alone
  add_test(NAME mpi_widedeep_resume COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/widedeep_resume.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli> ${PROJECT_SOURCE_DIR}/data/adult)
  set_tests_properties(mpi_widedeep_resume PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  # two hosts on one machine: a rank in each of two network namespaces, TCP
  # over a veth pair, against shared memory (skipped, exit 77, where no
  # namespace can be made: tests/mpi/netns_tcp.sh)
  add_test(NAME mpi_netns_tcp COMMAND sh ${PROJECT_SOURCE_DIR}/tests/mpi/netns_tcp.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:hetex_cli>)
  foreach(name mpi_netns_tcp mpi_gpt_zero mpi_gpt_zero_ckpt mpi_killed_rank mpi_killed_deferred mpi_killed_midstep mpi_collectives_np1 mpi_collectives_np2 mpi_collectives_np4 mpi_collectives_user mpi_transports
          mpi_ddp_np2 mpi_ddp_transports mpi_zero_np1 mpi_zero_np2 mpi_zero_np4 mpi_zero_transports mpi_zero_ckpt
          mpi_zero_bytes_np1 mpi_zero_bytes_np2 mpi_zero_bytes_np4
          mpi_zero_overlap_np2 mpi_zero_overlap_np4 mpi_pin_np1 mpi_pin_np2 mpi_pin_np2_unbound)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${HX_MPI_ENV}")
  endforeach()
endif()
