//===- test/CodeGenModule/OtherBuildModule.cpp - A module of another build ===//
//
// What a libhsnn-codegen.so from another hsnn build looks like to the
// loader: the entry point is there, the token is not this build's. The
// loader must refuse it before calling anything in the table.
//
//===----------------------------------------------------------------------===//
#include "CodeGenModule/CodeGenModule.h"

extern "C" __attribute__((visibility("default"))) const hsnn::detail::CodeGenModule *hsnn_codegen_module_v1() {
  static const hsnn::detail::CodeGenModule table = [] {
    hsnn::detail::CodeGenModule t;
    t.buildToken = "another-build";
    return t;
  }();
  return &table;
}
