# The Debian packages, from this build with one command (cpack -G DEB in the
# build directory, or packaging/deb.sh from a fresh tree). Split as
# rdma-core's are (docs/DESIGN.md, "Packaging"), one CMake install component
# each:
#   srdma          component srdma: the command, srdma-nvmf-target.service,
#                  the man pages, bash completion, an example configuration
#   libsrdma-dev   component dev: headers, libsrdma.a, CMake and pkg-config files
#   srdma-dropins  component dropins: libibverbs.so.1 and librdmacm.so.1 in
#                  <libdir>/softrdma, off the loader's path: they never shadow
#                  libibverbs1 or librdmacm1 (srdma run points a program at them)
# cpack rather than dpkg-buildpackage: the install rules the tree already
# has and tests (cmake --install) are the packages' contents, and one build
# directory makes both; a debian/ directory would restate them for debhelper.
set(SRDMA_PACKAGE_MAINTAINER "softrdma maintainers <maintainers@users.noreply.a-seed-0f322316.example>"
    CACHE STRING "The Maintainer of the Debian packages")

# srdma-nvmf-target.service names srdma by its installed path, which only
# the install knows (/usr/bin for the packages, P/bin for --prefix P):
# configured at install time. cpack installs with DESTDIR (CPACK_SET_DESTDIR).
install(CODE "
  string(MAKE_C_IDENTIFIER \"\${CMAKE_INSTALL_PREFIX}\" prefix_id)  # installs to two prefixes may run at once
  set(unit \"${CMAKE_BINARY_DIR}/packaging/unit/\${prefix_id}/srdma-nvmf-target.service\")
  set(SRDMA_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/packaging/srdma-nvmf-target.service.in\" \"\${unit}\" @ONLY)
  file(INSTALL \"\${unit}\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
" COMPONENT srdma)

# When the install strips (cpack: CPACK_STRIP_FILES; cmake --install
# --strip), what dh_strip does beyond a plain strip, as lintian asks: the
# .comment and .note sections out of the ELF files, and the debug
# information out of libsrdma.a (its symbols stay: it is linked against).
set(SRDMA_STRIP_SECTIONS --remove-section=.comment --remove-section=.note)
install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" ${SRDMA_STRIP_SECTIONS}
    \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/$<TARGET_FILE_NAME:srdma>\" COMMAND_ERROR_IS_FATAL ANY)
endif()" COMPONENT srdma)
install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug --enable-deterministic-archives ${SRDMA_STRIP_SECTIONS}
    \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:srdma_library>\"
    COMMAND_ERROR_IS_FATAL ANY)
endif()" COMPONENT dev)
foreach(t srdma_ibverbs srdma_rdmacm)
  if(TARGET ${t})
    install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" ${SRDMA_STRIP_SECTIONS}
    \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/softrdma/$<TARGET_FILE_NAME:${t}>\"
    COMMAND_ERROR_IS_FATAL ANY)
endif()" COMPONENT dropins)
  endif()
endforeach()

# Each package's /usr/share/doc/<package>: copyright and changelog.gz (a
# native package's name for it), as Debian policy asks of every package.
string(TIMESTAMP SRDMA_PACKAGE_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)  # SOURCE_DATE_EPOCH when set
set(SRDMA_PACKAGE_DOC ${CMAKE_BINARY_DIR}/packaging/doc)
file(WRITE ${SRDMA_PACKAGE_DOC}/changelog
  "softrdma (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
  "  * Packaged from the softrdma tree (cpack -G DEB, cmake/package.cmake).\n\n"
  " -- ${SRDMA_PACKAGE_MAINTAINER}  ${SRDMA_PACKAGE_DATE}\n")
add_custom_command(OUTPUT ${SRDMA_PACKAGE_DOC}/changelog.gz
  COMMAND gzip -9nc ${SRDMA_PACKAGE_DOC}/changelog > ${SRDMA_PACKAGE_DOC}/changelog.gz
  DEPENDS ${SRDMA_PACKAGE_DOC}/changelog)
add_custom_target(srdma_package_doc ALL DEPENDS ${SRDMA_PACKAGE_DOC}/changelog.gz)
set(components srdma dev dropins)
set(packages srdma libsrdma-dev srdma-dropins)
foreach(component package IN ZIP_LISTS components packages)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/copyright ${SRDMA_PACKAGE_DOC}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component})
endforeach()
# lintian's tags that stay, each with why (docs/DESIGN.md, "Packaging").
foreach(component package IN ZIP_LISTS components packages)
  if(EXISTS ${PROJECT_SOURCE_DIR}/packaging/lintian/${package})
    install(FILES ${PROJECT_SOURCE_DIR}/packaging/lintian/${package}
            DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides COMPONENT ${component})
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/packaging/nvmf-target.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/srdma/examples COMPONENT srdma)

# What the packages hold, to build before cpack without the whole tree
# (packaging/deb.sh): ninja srdma_package_contents.
add_custom_target(srdma_package_contents)
add_dependencies(srdma_package_contents srdma srdma_library srdma_package_doc)
foreach(t srdma_ibverbs srdma_rdmacm srdma_cli_docs)
  if(TARGET ${t})
    add_dependencies(srdma_package_contents ${t})
  endif()
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME softrdma)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${SRDMA_PACKAGE_MAINTAINER})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)                  # the prefix the install runs with under CPACK_SET_DESTDIR
set(CPACK_SET_DESTDIR ON)                       # the unit's install(CODE) above sees the prefix /usr
set(CPACK_STRIP_FILES ON)                       # Debian packages ship stripped binaries
set(CPACK_COMPONENTS_ALL srdma dev dropins)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)         # <package>_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SOURCE softrdma)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: from dpkg-shlibdeps on what each package's ELF files link.
# srdma-dropins' from cmake/cpack_project.cmake.in, which runs it with what
# CPackDeb cannot pass (-x libibverbs1: the drop-ins' librdmacm.so.1 links
# their own libibverbs.so.1, not the system's).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_DROPINS_PACKAGE_SHLIBDEPS OFF)
set(SRDMA_DROPIN_FILES "")
foreach(t srdma_ibverbs srdma_rdmacm)
  if(TARGET ${t})
    list(APPEND SRDMA_DROPIN_FILES $<TARGET_FILE:${t}>)
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/cpack_project.cmake.in ${CMAKE_BINARY_DIR}/packaging/cpack_project.cmake.in @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/packaging/cpack_project.cmake
     INPUT ${CMAKE_BINARY_DIR}/packaging/cpack_project.cmake.in)
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/packaging/cpack_project.cmake)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)   # no public shared library: nothing links against ours

set(CPACK_DEBIAN_SRDMA_PACKAGE_NAME srdma)
set(CPACK_DEBIAN_SRDMA_PACKAGE_RECOMMENDS srdma-dropins)  # srdma run
set(CPACK_DEBIAN_SRDMA_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_SRDMA_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_SRDMA_DESCRIPTION
    "softrdma's command and its NVMe-oF target service
softrdma is a user-space RDMA stack with a software HCA: RC, UC and UD queue
pairs over RoCEv2 (UDP), a verbs core, and an NVMe-over-Fabrics target and
host on top. No kernel module and no RDMA hardware are needed.

This package holds the srdma command (device information, perftest-style
benchmarks, NVMe-oF load and discovery, srdma run) and
srdma-nvmf-target.service, which serves the NVMe-oF subsystems of
/etc/srdma/nvmf-target.json (not enabled on install).")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libsrdma-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# What srdma.pc's Requires.private and srdmaConfig.cmake's find_dependency
# name: a program that links libsrdma.a needs them (no shared object of
# ours for dpkg-shlibdeps to read them from).
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libfmt-dev, libisal-dev, liburing-dev, zlib1g-dev, libssl-dev, pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "softrdma's C++ library (static) and headers
softrdma is a user-space RDMA stack with a software HCA.

This package holds libsrdma.a, the C++23 library of every layer (devices,
protection domains, memory registration, CQs and the shared CQ pool, QPs, the
CM, NVMe-oF target and host), its public headers (srdma/*.h), and the files
to build against it: find_package(srdma) and pkg-config --static srdma.")

set(CPACK_DEBIAN_DROPINS_PACKAGE_NAME srdma-dropins)
set(CPACK_DEBIAN_DROPINS_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_DROPINS_DESCRIPTION
    "softrdma's libibverbs and librdmacm drop-ins
softrdma is a user-space RDMA stack with a software HCA.

This package holds libibverbs.so.1 and librdmacm.so.1 that implement
rdma-core 44's ABI over softrdma, in a directory of their own off the
loader's path: they never shadow libibverbs1 or librdmacm1. srdma run (or
LD_LIBRARY_PATH) runs an unmodified verbs program on them.")

include(CPack)
