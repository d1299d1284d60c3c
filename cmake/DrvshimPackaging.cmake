# SPDX-License-Identifier: Apache-2.0
# Install rules and the exported CMake package (drvshim::drvshim), plus drvshim.pc.
include(CMakePackageConfigHelpers)

install(TARGETS drvshim EXPORT drvshimTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY driver/include/drvshim ptx/include/drvshim runtime_compat/include/drvshim DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET drvshim_fakecuda)
  # The fake driver, for testing programs without a GPU (drvshim/fakecuda.h says how).
  install(TARGETS drvshim_fakecuda EXPORT drvshimTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES tools/fakecuda/include/drvshim/fakecuda.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/drvshim)
endif()
install(FILES "${PROJECT_BINARY_DIR}/driver/generated/drvshim/version.hpp"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/drvshim)

set(DRVSHIM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/drvshim)
install(EXPORT drvshimTargets NAMESPACE drvshim:: DESTINATION ${DRVSHIM_CMAKE_DIR})
configure_package_config_file(cmake/drvshimConfig.cmake.in
  "${PROJECT_BINARY_DIR}/drvshimConfig.cmake" INSTALL_DESTINATION ${DRVSHIM_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/drvshimConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/drvshimConfig.cmake" "${PROJECT_BINARY_DIR}/drvshimConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/DrvshimCudart.cmake"
  DESTINATION ${DRVSHIM_CMAKE_DIR})

file(RELATIVE_PATH DRVSHIM_PC_PREFIX_FROM_PCDIR "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
configure_file(cmake/drvshim.pc.in "${PROJECT_BINARY_DIR}/drvshim.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/drvshim.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" "${PROJECT_SOURCE_DIR}/docs/getting-started.md"
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
