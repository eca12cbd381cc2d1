# Finds LLVM 19 and defines the interface target hsnn_llvm.
# HSNN_LLVM_STATIC links the component archives (a portable, self-contained
# binary); otherwise libLLVM.so (faster links for development and CI).
find_package(LLVM 19.1 CONFIG REQUIRED HINTS /usr/lib/llvm-19/lib/cmake/llvm)
message(STATUS "LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
add_library(hsnn_llvm INTERFACE)
target_include_directories(hsnn_llvm SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
separate_arguments(_llvm_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
target_compile_definitions(hsnn_llvm INTERFACE ${_llvm_defs})
if(HSNN_LLVM_STATIC)
  llvm_map_components_to_libnames(_llvm_libs core orcjit native nativecodegen passes target support analysis
                                  transformutils executionengine jitlink irreader linker ipo
                                  nvptxcodegen nvptxdesc nvptxinfo)
  target_link_libraries(hsnn_llvm INTERFACE ${_llvm_libs})
else()
  target_link_libraries(hsnn_llvm INTERFACE LLVM)
endif()

# lld (Debian's liblld-19-dev), optional: links a layer's cached objects into
# one shared object that later processes load with dlopen, without starting
# LLVM (lib/CPU/SharedObject.h). Not with static LLVM: lld's archives would
# pull in the shared libLLVM.
set(HSNN_HAVE_LLD OFF)
if(NOT HSNN_LLVM_STATIC)
  find_library(HSNN_LLD_ELF lldELF HINTS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH)
  find_library(HSNN_LLD_COMMON lldCommon HINTS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH)
  find_path(HSNN_LLD_INCLUDE lld/Common/Driver.h HINTS ${LLVM_INCLUDE_DIRS} NO_DEFAULT_PATH)
  find_library(HSNN_ZLIB z)
  find_library(HSNN_ZSTD zstd)
  if(HSNN_LLD_ELF AND HSNN_LLD_COMMON AND HSNN_LLD_INCLUDE AND HSNN_ZLIB AND HSNN_ZSTD)
    set(HSNN_HAVE_LLD ON)
    add_library(hsnn_lld INTERFACE)
    target_include_directories(hsnn_lld SYSTEM INTERFACE ${HSNN_LLD_INCLUDE})
    target_link_libraries(hsnn_lld INTERFACE ${HSNN_LLD_ELF} ${HSNN_LLD_COMMON} ${HSNN_ZLIB} ${HSNN_ZSTD} hsnn_llvm)
  endif()
endif()
message(STATUS "lld for linked cache entries: ${HSNN_HAVE_LLD}")
