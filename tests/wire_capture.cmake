# RoCEv2 on the wire, checked by an independent decoder (tshark) and an
# independent ICRC computation. Owned by the wire-capture test.
#
# wire_capture_test.sh captures lo with dumpcap while `srdma perf` servers
# and clients run in processes of their own, then decodes the frames with
# tshark and checks every ICRC with roce_icrc.py (python3, standard library
# only). Packages: tshark (dumpcap comes with wireshark-common), python3. It
# exits 77 (skipped) without them or where capturing on lo is not permitted.
# It runs the perf tests one after the other; PROCESSORS 2: a server and a
# client, each polling.
add_test(NAME wire_capture
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/wire_capture_test.sh $<TARGET_FILE:srdma>)
set_tests_properties(wire_capture PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)

# Congestion control on the wire (cnp_capture_test.sh): ECN codepoints and
# CNPs, decoded by tshark, every ICRC checked; none of either with
# SRDMA_CC=0. Same packages and skips as above.
add_test(NAME cnp_capture
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cnp_capture_test.sh $<TARGET_FILE:srdma>)
set_tests_properties(cnp_capture PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PROCESSORS 2)
