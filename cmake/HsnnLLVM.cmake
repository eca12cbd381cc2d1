# Finds LLVM 19 and defines the interface target hsnn_llvm.
# HSNN_LLVM_STATIC links the component archives (a portable, self-contained
# binary); otherwise libLLVM.so (faster links for development and CI).
find_package(LLVM 19.1 CONFIG REQUIRED HINTS /usr/lib/llvm-19/lib/cmake/llvm)
message(STATUS "LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
# hsnn_llvm_headers: what code that includes LLVM needs; hsnn_llvm_archives:
# LLVM's component archives (what a portable module links); hsnn_llvm:
# the headers and the library this build links, libLLVM.so or the archives.
add_library(hsnn_llvm_headers INTERFACE)
target_include_directories(hsnn_llvm_headers SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
separate_arguments(_llvm_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
target_compile_definitions(hsnn_llvm_headers INTERFACE ${_llvm_defs})
llvm_map_components_to_libnames(_llvm_libs core orcjit native nativecodegen passes target support analysis
                                transformutils executionengine jitlink irreader linker ipo
                                nvptxcodegen nvptxdesc nvptxinfo)
add_library(hsnn_llvm_archives INTERFACE)
target_link_libraries(hsnn_llvm_archives INTERFACE hsnn_llvm_headers ${_llvm_libs})
add_library(hsnn_llvm INTERFACE)
if(HSNN_LLVM_STATIC)
  target_link_libraries(hsnn_llvm INTERFACE hsnn_llvm_archives)
else()
  target_link_libraries(hsnn_llvm INTERFACE hsnn_llvm_headers LLVM)
endif()

# The linker program that links a layer's cached objects into one shared
# object, which later processes load with dlopen without starting LLVM
# (lib/CPU/SharedObject.h). Run as a program at run time, so neither lld's
# archives nor a fork of the process are needed; HSNN_LINKER overrides it.
# binutils' ld first: it starts in ~10 ms, ld.lld-19 (dynamic libLLVM) in ~100.
find_program(HSNN_LINKER NAMES ld.bfd ld ld.lld-19 ld.lld DOC "Linker for the cache's shared objects (empty: none)")
if(NOT HSNN_LINKER)
  set(HSNN_LINKER "")
endif()
message(STATUS "Linker for linked cache entries: ${HSNN_LINKER}")

# BLAKE3, which the kernel cache hashes with, from LLVM's own build of it:
# the C objects taken out of libLLVMSupport.a, so that code which hashes
# links neither libLLVM.so (60 ms to load) nor the rest of LLVMSupport.
get_target_property(_support LLVMSupport LOCATION)
execute_process(COMMAND ${CMAKE_AR} t ${_support} OUTPUT_VARIABLE _members RESULT_VARIABLE _rc)
string(REGEX MATCHALL "blake3[^\n]*\\.o" _blake3_members "${_members}")
if(NOT _rc EQUAL 0 OR NOT _blake3_members)
  message(FATAL_ERROR "no BLAKE3 objects in ${_support}")
endif()
set(_blake3_dir ${PROJECT_BINARY_DIR}/blake3)
file(MAKE_DIRECTORY ${_blake3_dir}/extracted)
execute_process(COMMAND ${CMAKE_AR} x ${_support} ${_blake3_members} WORKING_DIRECTORY ${_blake3_dir}/extracted
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "cannot extract BLAKE3 from ${_support}")
endif()
# `ar x` stamps the objects with the time of extraction: copied only when their bytes change, so that a
# re-configure (a documentation page's edit causes one) does not relink everything that hashes.
foreach(_member IN LISTS _blake3_members)
  file(COPY_FILE ${_blake3_dir}/extracted/${_member} ${_blake3_dir}/${_member} ONLY_IF_DIFFERENT)
endforeach()
list(TRANSFORM _blake3_members PREPEND ${_blake3_dir}/)
add_library(hsnn_blake3 STATIC ${_blake3_members})
set_target_properties(hsnn_blake3 PROPERTIES LINKER_LANGUAGE C)
target_include_directories(hsnn_blake3 SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
