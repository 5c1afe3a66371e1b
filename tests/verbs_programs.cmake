# Unmodified verbs programs on softrdma's libibverbs.so.1, between two
# processes on loopback addresses of their own. Owned by the verbs-programs
# test.
#
# verbs_programs_test.sh runs rdma-core's ibv_devices, ibv_devinfo and
# pingpongs (ibverbs-utils) and perftest's ib_*_bw and ib_*_lat, server and
# client each with SRDMA_ADDR of its own and LD_LIBRARY_PATH at the
# library's directory, and checks their exit statuses and numbers. It exits
# 77 (skipped) where those packages are not installed. Only where the
# library is built (not in sanitizer builds). PROCESSORS 2: a server and a
# client, each polling.
if(TARGET srdma_ibverbs)
  add_test(NAME verbs_programs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/verbs_programs_test.sh $<TARGET_FILE_DIR:srdma_ibverbs>)
  set_tests_properties(verbs_programs PROPERTIES TIMEOUT 540 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
