# UCX (ucx-utils: ucx_info, ucx_perftest) unmodified on softrdma's
# libibverbs.so.1, between two processes on loopback addresses of their
# own. Owned by the ucx-programs test.
#
# ucx_programs_test.sh checks that ucx_info -d lists rc_verbs and ud_verbs
# on srdma0:1, then runs ucx_perftest's UCP and UCT tests over both at 8 B,
# 4 KiB, 64 KiB and 1 MiB, server and client each with SRDMA_ADDR of its
# own, and checks exit statuses and result rows. It creates
# /dev/infiniband/srdma0 with `srdma devnode` if it is missing (and removes
# it after). Exits 77 (skipped) without ucx-utils. Only where the library
# is built (not in sanitizer builds). PROCESSORS 2: a server and a client,
# each polling.
if(TARGET srdma_ibverbs)
  add_test(NAME ucx_programs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ucx_programs_test.sh $<TARGET_FILE:srdma> $<TARGET_FILE_DIR:srdma_ibverbs>)
  # RESOURCE_LOCK: examples/ucp_pingpong may create and remove the same node.
  set_tests_properties(ucx_programs PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 PROCESSORS 2 RESOURCE_LOCK srdma_devnode)
endif()
