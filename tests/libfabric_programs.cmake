# libfabric (libfabric-bin: fi_info, fi_pingpong) unmodified on softrdma's
# libibverbs.so.1 and librdmacm.so.1: fi_info lists verbs MSG and DGRAM and
# verbs;ofi_rxm RDM endpoints, and fi_pingpong -c runs over msg, rdm (rxm),
# dgram and rdm (rxd) between two network namespaces and between two
# processes in one (see libfabric_programs_test.sh). Skips (77) without
# libfabric-bin or network namespaces. Only where the drop-ins are built.
# PROCESSORS 2: a server and a client, each polling.
if(TARGET srdma_ibverbs AND TARGET srdma_rdmacm)
  add_test(NAME libfabric_programs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/libfabric_programs_test.sh $<TARGET_FILE_DIR:srdma_rdmacm>)
  set_tests_properties(libfabric_programs PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
