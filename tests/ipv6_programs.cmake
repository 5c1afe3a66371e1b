# Unmodified verbs and RDMA CM programs over RoCEv2 on IPv6: two processes
# on ::1 sharing a RoCEv2 port of the run's own. Skips (77) without
# ibverbs-utils, rdmacm-utils or IPv6 on lo. PROCESSORS 2: a server and a
# client, each polling.
if(TARGET srdma_rdmacm)
  add_test(NAME ipv6_programs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ipv6_programs_test.sh $<TARGET_FILE_DIR:srdma_rdmacm>)
  set_tests_properties(ipv6_programs PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
