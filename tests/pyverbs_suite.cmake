# rdma-core's own pyverbs test suite (python3-pyverbs) unmodified on
# softrdma's libibverbs.so.1 and librdmacm.so.1: no error or failure, and
# no skip outside the hardware-only and not-yet lists of
# pyverbs_suite_test.sh. Skips (77) without python3-pyverbs. Only where the
# drop-ins are built (not in sanitizer builds).
if(TARGET srdma_ibverbs AND TARGET srdma_rdmacm)
  add_test(NAME pyverbs_suite
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pyverbs_suite_test.sh $<TARGET_FILE_DIR:srdma_rdmacm>)
  set_tests_properties(pyverbs_suite PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
