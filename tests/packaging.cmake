# The packaging tests (included by the root CMakeLists.txt, after the install
# rules): srdma run, and softrdma installed like a library.

# srdma run: its errors, and the environment it gives the program (only in
# builds with the libibverbs drop-in: not the sanitized ones, which would
# have nothing to give it).
set(cli_run_modes errors)
if(TARGET srdma_ibverbs)
  list(APPEND cli_run_modes env)
endif()
foreach(mode ${cli_run_modes})
  add_test(NAME cli_run_${mode} COMMAND ${PROJECT_SOURCE_DIR}/tests/run_test.sh $<TARGET_FILE:srdma>
           $<TARGET_EXISTS:srdma_ibverbs> ${mode})
  set_tests_properties(cli_run_${mode} PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
endforeach()

# cmake --install into a temporary prefix; examples/consumer built against it
# with find_package(srdma) and with pkg-config, and run.
add_test(NAME install COMMAND ${PROJECT_SOURCE_DIR}/tests/install_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}
         ${CMAKE_INSTALL_LIBDIR} $<TARGET_EXISTS:srdma_ibverbs> ${CMAKE_CXX_COMPILER})
set_tests_properties(install PROPERTIES TIMEOUT 90)

# The man pages and the completion against --help; --version against the
# drop-ins (plain build only: the sanitized builds make no man pages).
if(NOT SRDMA_SANITIZE)
  add_test(NAME cli_docs COMMAND ${PROJECT_SOURCE_DIR}/tests/cli_docs_test.sh $<TARGET_FILE:srdma>
           ${CMAKE_BINARY_DIR}/cli_docs ${CMAKE_BINARY_DIR}/lib/softrdma)
  set_tests_properties(cli_docs PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
endif()

# softrdma as a system component (plain build only: the sanitized builds
# have no drop-ins and are not packaged).
if(NOT SRDMA_SANITIZE)
  # The Debian packages: made by cpack, lintian, apt-get -s on a fresh
  # system, installed into a fresh root and used there, removed and purged.
  add_test(NAME package COMMAND ${PROJECT_SOURCE_DIR}/tests/package_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}
           ${CMAKE_INSTALL_LIBDIR} ${CMAKE_CXX_COMPILER})
  # About 30 s alone, 100 s beside the whole suite on 2 cores: lintian and cpack.
  set_tests_properties(package PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77)
  # srdma nvmf target as srdma-nvmf-target.service runs it: the notify
  # protocol, reloads (good and bad), a host removed while connected, stop.
  add_test(NAME service COMMAND ${PROJECT_SOURCE_DIR}/tests/service_test.sh $<TARGET_FILE:srdma>)
  set_tests_properties(service PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 PROCESSORS 2)
endif()
