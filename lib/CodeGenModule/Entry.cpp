//===- lib/CodeGenModule/Entry.cpp - libhsnn-codegen's table --------------===//
#include "ModuleParts.h"

#include "CodeGenModuleToken.h"

extern "C" __attribute__((visibility("default"))) const hsnn::detail::CodeGenModule *hsnn_codegen_module_v1() {
  using namespace hsnn::detail;
  static const CodeGenModule table = [] {
    CodeGenModule t;
    t.buildToken = HSNN_CODEGEN_MODULE_TOKEN;
    t.hostJit = moduleHostJit;
    t.ptxArchFor = nvptxArchFor;
    t.compilePtx = nvptxCompile;
    t.compileAot = aotCompile;
    return t;
  }();
  return &table;
}
