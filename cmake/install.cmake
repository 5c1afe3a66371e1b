# What `cmake --install <build> --prefix P` puts under P (GNUInstallDirs),
# each file in a component that is one Debian package (cmake/package.cmake):
# srdma (the command), dev (libsrdma-dev), dropins (srdma-dropins).
#   bin/srdma                                     the command
#   include/srdma/*.h                             the public API
#   <libdir>/libsrdma.a                           the library (srdma::srdma)
#   <libdir>/cmake/srdma/srdmaConfig*.cmake       find_package(srdma)
#   <libdir>/pkgconfig/srdma.pc                   pkg-config --static --cflags --libs srdma
#   <libdir>/softrdma/libibverbs.so.1             the drop-in (root CMakeLists.txt), where
#                                                 only srdma run / LD_LIBRARY_PATH finds it
#   <libdir>/softrdma/librdmacm.so.1              the RDMA CM drop-in, next to it (below)
include(CMakePackageConfigHelpers)

set(SRDMA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/srdma)
set(SRDMA_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(TARGETS srdma_library EXPORT srdmaTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/srdma DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        FILES_MATCHING PATTERN "*.h")
install(TARGETS srdma RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT srdma)

install(EXPORT srdmaTargets NAMESPACE srdma:: DESTINATION ${SRDMA_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/srdmaConfig.cmake.in
  ${CMAKE_BINARY_DIR}/packaging/srdmaConfig.cmake INSTALL_DESTINATION ${SRDMA_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/packaging/srdmaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/packaging/srdmaConfig.cmake ${CMAKE_BINARY_DIR}/packaging/srdmaConfigVersion.cmake
        DESTINATION ${SRDMA_CMAKE_DIR} COMPONENT dev)

# srdma.pc finds the prefix from where it lies (${pcfiledir}), so it holds
# whatever prefix `cmake --install --prefix` was given.
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(SRDMA_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(SRDMA_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
file(RELATIVE_PATH SRDMA_PC_TO_PREFIX /root/${SRDMA_PKGCONFIG_DIR} /root)
string(REGEX REPLACE "/$" "" SRDMA_PC_TO_PREFIX "${SRDMA_PC_TO_PREFIX}")
set(SRDMA_PC_SANITIZE "")
if(SRDMA_SANITIZE)
  set(SRDMA_PC_SANITIZE " -fsanitize=${SRDMA_SANITIZE}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/srdma.pc.in ${CMAKE_BINARY_DIR}/packaging/srdma.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/srdma.pc DESTINATION ${SRDMA_PKGCONFIG_DIR} COMPONENT dev)

# librdmacm.so.1 next to softrdma's libibverbs.so.1: `srdma run` and
# LD_LIBRARY_PATH=<libdir>/softrdma find both.
if(TARGET srdma_rdmacm)
  install(TARGETS srdma_rdmacm LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/softrdma NAMELINK_SKIP COMPONENT dropins)
endif()
