# The CM's MADs on the wire, checked by tshark's InfiniBand CM dissector.
# cm_capture_test.sh captures lo with dumpcap while srdma_tests runs the CM
# agent tests over the RoCEv2 link, then decodes every MAD between the test
# process's two devices. Packages: tshark (dumpcap comes with
# wireshark-common), python3. It exits 77 (skipped) without them or where
# capturing on lo is not permitted.
add_test(NAME cm_capture
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cm_capture_test.sh $<TARGET_FILE:srdma_tests>)
set_tests_properties(cm_capture PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
