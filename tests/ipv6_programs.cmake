# Unmodified verbs and RDMA CM programs over RoCEv2 on IPv6: two processes
# on ::1 sharing a RoCEv2 port of the run's own. Skips (77) without
# ibverbs-utils, rdmacm-utils or IPv6 on lo. PROCESSORS 2: a server and a
# client, each polling.
if(TARGET srdma_rdmacm)
  add_test(NAME ipv6_programs
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ipv6_programs_test.sh $<TARGET_FILE_DIR:srdma_rdmacm>)
  set_tests_properties(ipv6_programs PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
# The same across two network namespaces joined by a veth pair, IPv4 and
# IPv6 side by side (192.0.2.0/24, 2001:db8::/64 inside them): rping over
# both at once (the IPv6 server hears its unknown client through the CM's
# allowance), ibv_rc_pingpong over IPv6, and NVMe-oF over both (srdma
# nvmf target, blk bench --connect --verify). Skips (77) without root.
if(TARGET srdma_rdmacm)
  add_test(NAME ipv6_hosts
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ipv6_hosts_test.sh $<TARGET_FILE_DIR:srdma_rdmacm> $<TARGET_FILE:srdma>)
  set_tests_properties(ipv6_hosts PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
