# softrdma between processes: two network namespaces joined by a veth pair,
# and faults (an impaired link, a peer killed). Owned by the process tests.
#
# Both scripts drive `srdma perf` as separate server and client processes.
# They exit 77 (skipped) where they cannot run: two_hosts needs root for the
# namespaces. PROCESSORS 2: a server and a client, each polling.
add_test(NAME two_hosts COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/two_hosts_test.sh $<TARGET_FILE:srdma>)
set_tests_properties(two_hosts PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
add_test(NAME process_faults COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/process_faults_test.sh $<TARGET_FILE:srdma>)
set_tests_properties(process_faults PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
# NVMe-oF between processes: `srdma nvmf target` and `srdma blk bench
# --connect`, connected through the CM on the wire.
add_test(NAME nvmf_processes COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/nvmf_processes_test.sh $<TARGET_FILE:srdma>)
set_tests_properties(nvmf_processes PROPERTIES TIMEOUT 120 PROCESSORS 2)
# The tools over IPv6, processes on ::1: srdma perf (its side channel on TCP
# over IPv6), info, nvmf target with discover and blk bench --connect
# [::1]:PORT, and the addresses they refuse. Skips (77) without IPv6 on lo.
add_test(NAME ipv6_tools COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ipv6_tools_test.sh $<TARGET_FILE:srdma>)
set_tests_properties(ipv6_tools PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
