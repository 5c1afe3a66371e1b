# The man pages and the bash completion, made at build time by srdma
# itself from its command-line definition (src/tools/cli_docs.h): one
# source with --help. Under ${CMAKE_BINARY_DIR}/cli_docs:
#   man1/*.1            the pages (`man -l` reads them; tests check them)
#   man1.gz/*.1.gz      the same, gzip -9n, as installed
#   completions/srdma   bash completion
# Not in sanitized builds: a TSan srdma cannot run during the build
# (scripts/test.sh runs its tests under setarch -R), and those builds are
# not packaged.
if(SRDMA_SANITIZE)
  return()
endif()
set(SRDMA_CLI_DOCS_DIR ${CMAKE_BINARY_DIR}/cli_docs)
add_custom_command(OUTPUT ${SRDMA_CLI_DOCS_DIR}/stamp
  COMMAND ${CMAKE_COMMAND} -DSRDMA=$<TARGET_FILE:srdma> -DOUT=${SRDMA_CLI_DOCS_DIR}
          -P ${CMAKE_CURRENT_LIST_DIR}/make_cli_docs.cmake
  DEPENDS srdma ${CMAKE_CURRENT_LIST_DIR}/make_cli_docs.cmake
  COMMENT "Man pages and bash completion from srdma's command line" VERBATIM)
add_custom_target(srdma_cli_docs ALL DEPENDS ${SRDMA_CLI_DOCS_DIR}/stamp)

install(DIRECTORY ${SRDMA_CLI_DOCS_DIR}/man1.gz/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT srdma)
install(FILES ${SRDMA_CLI_DOCS_DIR}/completions/srdma
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT srdma)
