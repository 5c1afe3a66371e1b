# srdma --version (src/tools/version.cc): the project's version and the ABI
# the drop-ins implement, at configure time; the git commit at every build.
# Included after src/verbs and src/rdmacm, whose targets and version
# scripts it reads (it does not change them).
set(SRDMA_GIT_COMMIT "" CACHE STRING "The commit srdma --version names (default: the checkout's HEAD)")
find_program(SRDMA_GIT git)

# "libibverbs.so.1 1.14.44.0: rdma-core 44's ABI, IBVERBS_1.0 .. IBVERBS_1.14, IBVERBS_PRIVATE_34"
function(srdma_dropin_abi out soname target map)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${map})
  file(STRINGS ${map} nodes REGEX "^[A-Za-z0-9_.]+ *{")
  list(TRANSFORM nodes REPLACE " *{.*" "")
  set(public ${nodes})
  list(FILTER public EXCLUDE REGEX "PRIVATE")
  set(private ${nodes})
  list(FILTER private INCLUDE REGEX "PRIVATE")
  list(GET public 0 first)
  list(GET public -1 last)
  set(nodes_text "${first} .. ${last}")
  foreach(p IN LISTS private)
    string(APPEND nodes_text ", ${p}")
  endforeach()
  if(TARGET ${target})
    get_target_property(version ${target} VERSION)
    string(REGEX REPLACE "^[0-9]+\\.[0-9]+\\.([0-9]+).*" "\\1" rdma_core "${version}")
    set(text "drop-in ${soname} ${version}: rdma-core ${rdma_core}'s ABI, ${nodes_text}")
  else()
    set(text "drop-in ${soname}: ${nodes_text} (not in this build: sanitized builds have no drop-ins)")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
srdma_dropin_abi(verbs_abi libibverbs.so.1 srdma_ibverbs ${PROJECT_SOURCE_DIR}/src/verbs/libibverbs.map)
srdma_dropin_abi(rdmacm_abi librdmacm.so.1 srdma_rdmacm ${PROJECT_SOURCE_DIR}/src/rdmacm/librdmacm.map)
set(SRDMA_DROPIN_ABI "${verbs_abi}\\n${rdmacm_abi}")

set(SRDMA_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${CMAKE_CURRENT_LIST_DIR}/version_info.h.in ${SRDMA_GENERATED_DIR}/tools/version_info.h @ONLY)
add_custom_target(srdma_git_commit
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${SRDMA_GENERATED_DIR}/tools/git_commit.h
          -DGIT=${SRDMA_GIT} -DCOMMIT=${SRDMA_GIT_COMMIT} -P ${CMAKE_CURRENT_LIST_DIR}/git_commit.cmake
  BYPRODUCTS ${SRDMA_GENERATED_DIR}/tools/git_commit.h
  COMMENT "The git commit for srdma --version" VERBATIM)
target_sources(srdma PRIVATE ${PROJECT_SOURCE_DIR}/src/tools/version.cc)
target_include_directories(srdma PRIVATE ${SRDMA_GENERATED_DIR})
add_dependencies(srdma srdma_git_commit)
