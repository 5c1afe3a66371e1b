# Unmodified RDMA CM programs (rping, ucmatose, rdma_server/rdma_client,
# cmtime, udaddy over SIDR, mckey over UD multicast, perftest -R; udpong
# once rsockets exist) on softrdma's
# librdmacm.so.1 and libibverbs.so.1, between two processes on loopback
# addresses of their own; and refused/unreachable connects failing within
# seconds. Skips (77) without rdmacm-utils and perftest. PROCESSORS 2: a
# server and a client, each polling.
if(TARGET srdma_rdmacm)
  add_test(NAME rdmacm_programs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rdmacm_programs_test.sh $<TARGET_FILE_DIR:srdma_rdmacm>)
  set_tests_properties(rdmacm_programs PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
