# `cmake --install` puts libhsnn, its headers, hsnn-jit and a CMake package
# (find_package(hsnn CONFIG REQUIRED) + target_link_libraries(app hsnn::hsnn)).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_hsnn_targets hsnn hsnn_fmt)
if(NOT HSNN_BUILD_SHARED)
  # A static libhsnn needs its component archives at link time.
  list(APPEND _hsnn_targets hsnnExpr hsnnProgram hsnnModel hsnnCache hsnnKernelSpec hsnnCPU hsnnCUDADriver hsnnCUDAEngine hsnnBackend hsnn_blake3
       hsnnCodeGenLoader)
endif()
install(TARGETS ${_hsnn_targets} EXPORT hsnnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The code generator module, which libhsnn loads on the first compile from
# LIBDIR/hsnn (CodeGenModule.h).
if(HSNN_ENABLE_JIT)
  install(TARGETS hsnnCodeGenModule LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/hsnn)
endif()
# An installed hsnn-jit finds a shared libhsnn next to it. Only then: CMake
# pads the build tree's run path with ':' to the install one's length, and
# each empty entry makes the dynamic linker look in the working directory.
if(HSNN_BUILD_SHARED)
  set_target_properties(hsnn-jit PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()
install(TARGETS hsnn-jit RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hsnn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/hsnn/Version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hsnn)
install(EXPORT hsnnTargets NAMESPACE hsnn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hsnn)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hsnnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/hsnnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hsnn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hsnnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hsnnConfig.cmake ${PROJECT_BINARY_DIR}/hsnnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hsnn)
