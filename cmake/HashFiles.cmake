# hsnn_hash_files(OUT EXTRA FILES...): the first 20 hex digits of a SHA-256
# over EXTRA and each file's SHA-256, in the order given: the build tokens
# that retire what another build made (code generator modules, model
# snapshots).
function(hsnn_hash_files out extra)
  set(text "${extra}")
  foreach(f ${ARGN})
    file(SHA256 ${f} h)
    string(APPEND text ";${h}")
  endforeach()
  string(SHA256 token "${text}")
  string(SUBSTRING ${token} 0 20 token)
  set(${out} ${token} PARENT_SCOPE)
endfunction()

# hsnn_build_token(TARGET NAME HEADER GLOBS...): a custom target TARGET
# that keeps ${PROJECT_BINARY_DIR}/include/HEADER defining NAME as a hash of
# the files GLOBS match, the version, the compiler and its flags. Targets
# whose cache entries those files decide depend on TARGET.
function(hsnn_build_token target name header)
  file(GLOB files CONFIGURE_DEPENDS ${ARGN})
  list(SORT files)
  list(JOIN files "|" arg)
  set(out ${PROJECT_BINARY_DIR}/include/${header})
  add_custom_command(OUTPUT ${out}
                     COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAME=${name} "-DFILES=${arg}"
                             "-DEXTRA=${PROJECT_VERSION} ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} ${CMAKE_CXX_FLAGS} ${CMAKE_BUILD_TYPE}"
                             -P ${PROJECT_SOURCE_DIR}/cmake/BuildToken.cmake
                     DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/BuildToken.cmake
                             ${PROJECT_SOURCE_DIR}/cmake/HashFiles.cmake
                     COMMENT "Hashing the sources behind ${name}" VERBATIM)
  add_custom_target(${target} DEPENDS ${out})
endfunction()
