# Installation and packaging: `cmake --install` puts the programs, the
# client library with its headers, a CMake package (find_package(kvtier) ->
# kvtier::client) and a pkg-config file (kvtier.pc), the default
# configuration and the systemd unit in their usual places; CPack makes a .deb.
#
# The client library is the static libraries of the client and the layers it
# stands on (protocol, prefix_index, common); its headers keep their module
# folders under include/kvtier, so `#include "client/client.h"` reads the
# same in kvtier and in a worker.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVTIER_CLIENT_MODULES client protocol prefix_index common)
set(KVTIER_CLIENT_HEADERS
    client/client.h client/kvtier_c.h client/cuda_ipc.h common/fp8.h common/layout.h common/result.h
    common/status.h
    prefix_index/block_key.h prefix_index/key_hasher.h protocol/wire.h)

foreach(mod IN LISTS KVTIER_CLIENT_MODULES)
  set_target_properties(kvtier_${mod} PROPERTIES EXPORT_NAME ${mod})
  target_include_directories(kvtier_${mod}
                             PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/kvtier>)
  list(APPEND kvtier_client_targets kvtier_${mod})
endforeach()
foreach(header IN LISTS KVTIER_CLIENT_HEADERS)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvtier/${folder}
          COMPONENT dev)
endforeach()

install(TARGETS ${kvtier_client_targets} EXPORT kvtierTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier
        COMPONENT dev)
configure_package_config_file(cmake/kvtierConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kvtierConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kvtierConfig.cmake ${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier COMPONENT dev)

# pkg-config: static libraries, so the libraries they need come along. The
# prefix is found from the file's own place, so the tree can be relocated.
file(RELATIVE_PATH KVTIER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/kvtier.pc.in ${CMAKE_BINARY_DIR}/kvtier.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kvtier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# Configured with CMAKE_INSTALL_PREFIX=/usr (a distribution package, see
# scripts/package-deb.sh) the configuration goes to /etc/kvtier and the
# systemd files to /lib/systemd and /usr/lib/sysusers.d; under any other
# prefix everything stays inside it, so `cmake --install --prefix DIR` of a
# test or a user never writes outside DIR.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(KVTIER_CONFIG_DIR /etc/kvtier)
  set(KVTIER_SYSTEMD_DIR /lib/systemd/system)
  set(KVTIER_SYSUSERS_DIR /usr/lib/sysusers.d)
else()
  set(KVTIER_CONFIG_DIR ${CMAKE_INSTALL_SYSCONFDIR}/kvtier)
  set(KVTIER_SYSTEMD_DIR lib/systemd/system)
  set(KVTIER_SYSUSERS_DIR lib/sysusers.d)
endif()
install(TARGETS kvtierd kvtier RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT daemon)
install(FILES deploy/kvtierd.toml DESTINATION ${KVTIER_CONFIG_DIR} COMPONENT daemon)
install(FILES deploy/kvtierd.service DESTINATION ${KVTIER_SYSTEMD_DIR} OPTIONAL COMPONENT daemon)
install(FILES deploy/kvtier.sysusers DESTINATION ${KVTIER_SYSUSERS_DIR}
        RENAME kvtier.conf OPTIONAL COMPONENT daemon)
install(FILES deploy/prometheus.yml deploy/grafana-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kvtier OPTIONAL COMPONENT daemon)
install(FILES docs/operations.md docs/metrics.md docs/protocol.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT daemon)

# `cpack -G DEB` in the build tree: one package with everything, its
# library dependencies found by dpkg-shlibdeps.
set(CPACK_PACKAGE_NAME kvtier)
set(CPACK_PACKAGE_VENDOR "kvtier")
set(CPACK_PACKAGE_CONTACT "kvtier developers <kvtier@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Tiered KV-cache daemon for LLM inference (GPU, host RAM, SSD) and its client library")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libxxhash-dev")
# postinst: the system user (sysusers.d) and a daemon-reload; no auto-start.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/debian/postinst)
include(CPack)
