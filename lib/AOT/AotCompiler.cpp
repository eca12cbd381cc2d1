//===- lib/AOT/AotCompiler.cpp - Ahead-of-time objects, PTX and headers ---===//
//
// The front end (model, requests, entry points, C header) is here; the
// object is made by the code generator module (AotCodeGen.cpp).
//
//===----------------------------------------------------------------------===//
#include "hsnn/AOT.h"

#include "CodeGenModule/CodeGenModule.h"
#include "Model/CompiledModel.h"
#include "Model/KernelRequests.h"
#include "Runtime/Warn.h"

#include "hsnn/Runtime.h"

#include <fmt/format.h>
#include <cctype>
#include <map>

namespace hsnn {
namespace {

using detail::KernelRequest;
using detail::KernelKind;

bool isCIdentifier(const std::string &s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return true;
}

const char *cType(DType d) { return d == DType::F32 ? "float" : "double"; }

// Wraps declarations in include guards and extern "C".
std::string cHeader(const std::string &comment, const std::string &guard, const std::string &body) {
  return fmt::format("{}#ifndef HSNN_{}_H\n#define HSNN_{}_H\n#include <stdint.h>\n#ifdef __cplusplus\nextern \"C\" {{\n"
                     "#endif\n\n{}\n#ifdef __cplusplus\n}}\n#endif\n#endif\n",
                     comment, guard, guard, body);
}

std::string upperCase(const std::string &s) {
  std::string u;
  for (char c : s)
    u += char(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

// The same model compile() builds; its warnings go through the warning handler.
Expected<std::shared_ptr<const detail::CompiledModel>> buildModel(const std::vector<NodeSpec> &nodes,
                                                                  detail::ModelOptions options) {
  options.strict = runtimeFlags().strict;
  std::vector<std::string> warnings;
  auto m = detail::CompiledModel::activation(nodes, options, warnings);
  for (const std::string &w : warnings)
    detail::warn(w);
  return m;
}
Expected<std::shared_ptr<const detail::CompiledModel>> buildModel(const std::string &formula,
                                                                  const std::map<std::string, double> &constants,
                                                                  detail::ModelOptions options) {
  options.strict = runtimeFlags().strict;
  std::vector<std::string> warnings;
  auto m = detail::CompiledModel::loss(formula, constants, options, warnings);
  for (const std::string &w : warnings)
    detail::warn(w);
  return m;
}

// ", differentiated 2 times in num (its formulas below are the derivatives)".
// What an object needs at link time: hsnn's math is inline IR where the
// CPU has FMA; without it the kernels call libmvec's vector functions.
constexpr const char *kLinkNote = "Objects for a CPU with FMA (x86-64-v3 or newer, aarch64) call no library; "
                                  "without FMA the math calls glibc's libmvec: link with -lmvec -lm.";

std::string orderNote(unsigned order, const char *variable) {
  if (order == 0)
    return "";
  return fmt::format(", differentiated {} time{} in {} (the formulas below are the derivatives)", order,
                     order == 1 ? "" : "s", variable);
}

std::string formatParams(const std::vector<double> &p) {
  std::string s;
  for (size_t i = 0; i < p.size(); ++i)
    s += fmt::format("{}{}", i ? ", " : "", p[i]);
  return s;
}

struct FrontEnd {
  std::shared_ptr<const detail::CompiledModel> model;
  const detail::CodeGenModule *module = nullptr;
};
// What every object starts from: a C name, the model (its errors first),
// then the code generator that compiles it.
template <class BuildModel>
Expected<FrontEnd> frontEnd(const std::string &name, std::string_view what, BuildModel &&buildModel) {
  if (!isCIdentifier(name))
    return Error(ErrorCode::InvalidArgument, fmt::format("{} name '{}' is not a C identifier", what, name));
  auto compiled = buildModel();
  if (!compiled)
    return compiled.takeError();
  auto module = detail::codeGenModule();
  if (!module)
    return module.error();
  return FrontEnd{std::move(*compiled), *module};
}

// The kernels and entry points of a layer's object.
detail::AotCode layerCode(const std::string &name, const detail::CompiledModel &model, DType dtype, Layout layout,
                          unsigned vectorBits) {
  // One kernel set per formula (or per formula and constants when baked).
  std::vector<KernelRequest> requests;
  detail::LayerEntryPoints entry;
  entry.name = name;
  entry.dtype = dtype;
  entry.layout = layout;
  entry.offsets = model.offsets;
  entry.defaultParams = model.defaultParams;
  auto symbol = [&](size_t unit, KernelKind k) { return fmt::format("{}_u{}_{}", name, unit, detail::kindName(k)); };
  // The elementwise kinds several formulas per function (much faster to
  // compile), the constant gradients one per formula.
  for (KernelKind k : detail::kActivationKinds) {
    detail::MultiKernelSet set = detail::multiUnitKernels(model, k, name, layout == Layout::BatchMajor);
    for (uint32_t unit : model.unitOf) {
      entry.nodeKernel[size_t(k)].push_back(set.requests[set.requestOf[unit]].symbol);
      entry.nodeCase[size_t(k)].push_back(set.caseOf[unit]);
    }
    requests.insert(requests.end(), set.requests.begin(), set.requests.end());
  }
  for (size_t u = 0; u < model.units.size(); ++u)
    requests.push_back({symbol(u, KernelKind::ConstantGradient), model.units[u].programs[size_t(KernelKind::ConstantGradient)],
                        KernelKind::ConstantGradient, dtype, layout == Layout::BatchMajor});
  for (uint32_t unit : model.unitOf)
    entry.constantKernel.push_back(symbol(unit, KernelKind::ConstantGradient));
  // Batch-major layers with a pattern: row kernels for the whole-layer entry points.
  size_t lanes = vectorBits / (dtype == DType::F32 ? 32 : 64);
  if (auto plan = layout == Layout::BatchMajor ? detail::planRowSegments(model.unitOf, lanes) : std::nullopt) {
    for (const detail::RowSegment &seg : *plan)
      entry.rowSegments.push_back({seg.first, seg.periods, seg.slots.size(), {}, {}});
    for (KernelKind k : detail::kActivationKinds) {
      detail::RowKernelSet set = detail::rowKernels(*plan, model, k, name);
      for (size_t g = 0; g < plan->size(); ++g) {
        entry.rowSegments[g].kernel[size_t(k)] = set.requests[set.requestOf[g]].symbol;
        entry.rowSegments[g].tableAt[size_t(k)] = set.tableAt[g];
      }
      entry.rowTableSource[size_t(k)] = std::move(set.tableSource);
      requests.insert(requests.end(), set.requests.begin(), set.requests.end());
    }
  }
  return detail::AotCode{std::move(requests), std::move(entry), {}, {}};
}

} // namespace

Expected<AotArtifact> compileLayerAot(const std::string &name, const std::vector<NodeSpec> &nodes, DType dtype,
                                      Layout layout, const AotOptions &options) {
  auto derivation = detail::derivativeSteps(options.order);
  if (!derivation)
    return derivation.takeError();
  auto front = frontEnd(name, "layer", [&] {
    return buildModel(nodes, {.dtype = dtype, .layout = layout, .bakeConstants = options.bakeConstants,
                              .derivation = *derivation});
  });
  if (!front)
    return front.takeError();
  const detail::CompiledModel &model = *front->model;

  // Row kernels are planned for the target's vectors, which the module
  // knows once it has checked the target.
  bool rowKernels = false;
  auto build = [&](unsigned vectorBits) -> Expected<detail::AotCode> {
    detail::AotCode code = layerCode(name, model, dtype, layout, vectorBits);
    rowKernels = !code.layer->rowSegments.empty();
    return code;
  };
  auto bytes = front->module->compileAot(options, build);
  if (!bytes)
    return bytes.takeError();

  const char *T = cType(dtype);
  std::string upper = upperCase(name);
  std::string h = fmt::format(
      "/* {name}: generated by hsnn-jit from an activation layer{ofOrder}. Do not edit.\n"
      " * {nodes} nodes, {dtype}, {layout} ({layoutDoc}).\n"
      " * {linkNote}\n"
      " * Entry points are thread-safe; the _range forms run nodes [node_begin, node_end).\n"
      "{rows}"
      " * params: {name}_default_params or a copy with changed values; node n's constants start at\n"
      " * {name}_param_offsets[n], in this order:\n",
      fmt::arg("rows", !rowKernels
                           ? ""
                           : " * Formulas that repeat a pattern across the nodes run through row kernels: each call\n"
                             " * mallocs a table of their constants (and goes node by node if that fails).\n"),
      fmt::arg("name", name), fmt::arg("nodes", model.numNodes()), fmt::arg("dtype", to_string(dtype)),
      fmt::arg("linkNote", kLinkNote),
      fmt::arg("layout", to_string(layout)), fmt::arg("ofOrder", orderNote(options.order, "num")),
      fmt::arg("layoutDoc", layout == Layout::NodesMajor ? "element (n, b) at n*batch + b" : "element (b, n) at b*nodes + n"));
  for (size_t n = 0; n < model.numNodes(); ++n) {
    const auto &c = model.constantNames(n);
    h += fmt::format(" *   node {}: {} = {}\n", n, print(model.group(n).formula.expr),
                     c.empty() ? "(none)" : fmt::format("{}", fmt::join(c, ", ")));
  }
  h += " */\n";
  std::string body = fmt::format(
      "#define {U}_NUM_NODES {nodes}\n#define {U}_NUM_PARAMS {np}\n#define {U}_LAYOUT_{L} 1\ntypedef {T} {name}_elem_t;\n"
      "extern const double {name}_default_params[{npa}]; /* {vals} */\nextern const int64_t {name}_param_offsets[{nodes}];\n\n"
      "void {name}_forward(const {T} *z, {T} *a, int64_t batch, const double *params);\n"
      "void {name}_backward(const {T} *z, const {T} *err, {T} *delta, int64_t batch, const double *params);\n"
      "void {name}_fused(const {T} *z, {T} *a, {T} *dfdz, int64_t batch, const double *params);\n"
      "void {name}_forward_range(const {T} *z, {T} *a, int64_t batch, const double *params, int64_t node_begin, int64_t node_end);\n"
      "void {name}_backward_range(const {T} *z, const {T} *err, {T} *delta, int64_t batch, const double *params, int64_t node_begin, int64_t node_end);\n"
      "void {name}_fused_range(const {T} *z, {T} *a, {T} *dfdz, int64_t batch, const double *params, int64_t node_begin, int64_t node_end);\n"
      "/* Trainable constants: grads[i] (one per params entry) = the sum over its node's batch of err * d a / d params[i]. */\n"
      "void {name}_constant_gradient(const {T} *z, const {T} *err, double *grads, int64_t batch, const double *params);\n",
      fmt::arg("U", upper), fmt::arg("name", name), fmt::arg("T", T), fmt::arg("nodes", model.numNodes()),
      fmt::arg("np", model.defaultParams.size()), fmt::arg("npa", std::max<size_t>(1, model.defaultParams.size())),
      fmt::arg("vals", formatParams(model.defaultParams)),
      fmt::arg("L", layout == Layout::NodesMajor ? "NODES_MAJOR" : "BATCH_MAJOR"));
  return AotArtifact{std::move(*bytes), cHeader(h, upper, body)};
}

Expected<AotArtifact> compileLossAot(const std::string &name, const std::string &formula,
                                     const std::map<std::string, double> &constants, DType dtype,
                                     const AotOptions &options) {
  auto derivation = detail::derivativeSteps(options.order);
  if (!derivation)
    return derivation.takeError();
  auto front = frontEnd(name, "loss", [&] {
    return buildModel(formula, constants, {.dtype = dtype, .bakeConstants = options.bakeConstants, .derivation = *derivation});
  });
  if (!front)
    return front.takeError();
  const detail::CompiledModel &model = *front->model;
  std::vector<KernelRequest> requests;
  for (KernelKind k : detail::kLossKinds)
    requests.push_back({fmt::format("{}_{}", name, detail::kindInfo(k).cName), model.units[0].programs[size_t(k)], k, dtype});
  requests.push_back({name + "_constant_gradient", model.units[0].programs[size_t(KernelKind::LossConstantGradient)],
                      KernelKind::LossConstantGradient, dtype});
  auto bytes = front->module->compileAot(options, [&](unsigned) -> Expected<detail::AotCode> {
    return detail::AotCode{std::move(requests), std::nullopt, name, model.defaultParams};
  });
  if (!bytes)
    return bytes.takeError();
  const char *T = cType(dtype);
  std::string upper = upperCase(name);
  std::string h = fmt::format(
      "/* {name}: generated by hsnn-jit from the loss {formula}{ofOrder}. Do not edit.\n"
      " * d/dy_pred: {deriv}\n"
      " * {linkNote}\n"
      " * Mean loss = {name}_sum(...)/n; its gradient uses scale = 1/n (sum: 1).\n"
      " * params ({consts}): {name}_default_params or a copy with changed values.\n */\n",
      fmt::arg("name", name), fmt::arg("formula", print(model.groups[0].formula.expr)),
      fmt::arg("ofOrder", orderNote(options.order, "y_pred")), fmt::arg("linkNote", kLinkNote),
      fmt::arg("deriv", print(model.groups[0].derivative)),
      fmt::arg("consts", model.constantNames(0).empty() ? "none" : fmt::format("{}", fmt::join(model.constantNames(0), ", "))));
  std::string body = fmt::format(
      "#define {U}_NUM_PARAMS {np}\nextern const double {name}_default_params[{npa}];\n"
      "/* out[i] = loss(yp[i], yt[i]); returns 0 */\n"
      "double {name}_elements(const {T} *yp, const {T} *yt, {T} *out, const double *params, int64_t n, {T} scale);\n"
      "/* returns the sum of the losses (out unused, may be NULL) */\n"
      "double {name}_sum(const {T} *yp, const {T} *yt, {T} *out, const double *params, int64_t n, {T} scale);\n"
      "/* grad[i] = scale * dloss/dy_pred; returns 0 */\n"
      "double {name}_gradient(const {T} *yp, const {T} *yt, {T} *grad, const double *params, int64_t n, {T} scale);\n"
      "/* grad as above; returns the sum of the losses */\n"
      "double {name}_fused(const {T} *yp, const {T} *yt, {T} *grad, const double *params, int64_t n, {T} scale);\n"
      "/* Trainable constants: grads[j] = scale * the sum of d loss / d params[j]; returns 0 */\n"
      "double {name}_constant_gradient(const {T} *yp, const {T} *yt, double *grads, const double *params, int64_t n, double scale);\n",
      fmt::arg("name", name), fmt::arg("U", upper), fmt::arg("T", T), fmt::arg("np", model.defaultParams.size()),
      fmt::arg("npa", std::max<size_t>(1, model.defaultParams.size())));
  // The spec's reduction: host-side arithmetic on the kernels above, so it
  // lives in the header (the object is the same for every reduction).
  Reduction red = options.reduction;
  body += fmt::format("\n/* The reduction this loss was compiled with: {red}. */\n#define {U}_REDUCTION_{RED} 1\n",
                      fmt::arg("red", to_string(red)), fmt::arg("U", upper), fmt::arg("RED", upperCase(std::string(to_string(red)))));
  if (red != Reduction::None)
    body += fmt::format("/* The loss over n elements ({what}). */\n"
                        "static inline double {name}_loss(const {T} *yp, const {T} *yt, const double *params, int64_t n) {{\n"
                        "  return {name}_sum(yp, yt, 0, params, n, ({T})1){div};\n}}\n",
                        fmt::arg("what", red == Reduction::Mean ? "the mean" : "the sum"), fmt::arg("name", name),
                        fmt::arg("T", T), fmt::arg("div", red == Reduction::Mean ? " / (double)n" : ""));
  body += fmt::format("/* d {name}_loss / d yp[i]{what}. */\n"
                      "static inline void {name}_loss_gradient(const {T} *yp, const {T} *yt, {T} *grad, const double *params, "
                      "int64_t n) {{\n  {name}_gradient(yp, yt, grad, params, n, {scale});\n}}\n",
                      fmt::arg("name", name), fmt::arg("T", T),
                      fmt::arg("what", red == Reduction::Mean ? " (scaled by 1/n)" : ""),
                      fmt::arg("scale", red == Reduction::Mean ? fmt::format("({})(1.0 / (double)n)", T) : fmt::format("({})1", T)));
  return AotArtifact{std::move(*bytes), cHeader(h, upper, body)};
}

namespace {
template <class T> std::string commaList(const std::vector<T> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += fmt::format("{}{}", i ? ", " : "", v[i]);
  return s;
}
} // namespace

Expected<std::string> compileLayerPtx(const std::string &name, const std::vector<NodeSpec> &nodes, DType dtype,
                                      const std::string &arch, int optLevel, unsigned order) {
  if (!isCIdentifier(name))
    return Error(ErrorCode::InvalidArgument, fmt::format("layer name '{}' is not a C identifier", name));
  auto derivation = detail::derivativeSteps(order);
  if (!derivation)
    return derivation.takeError();
  auto compiled = buildModel(nodes, {.dtype = dtype, .derivation = *derivation});
  if (!compiled)
    return compiled.takeError();
  const detail::CompiledModel &model = **compiled;
  detail::GpuModuleSpec spec;
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor})
    for (KernelKind k : detail::kActivationKinds) {
      detail::GpuLayerKernel kernel{fmt::format("{}_{}_{}", name, detail::kindInfo(k).cName, to_string(layout)), k, dtype,
                                    layout, {}};
      for (const detail::CodeUnit &u : model.units)
        kernel.units.push_back(u.programs[size_t(k)]);
      spec.layers.push_back(std::move(kernel));
    }
  auto ptx = detail::compilePtx(spec, {.arch = arch, .optLevel = optLevel});
  if (!ptx)
    return ptx.takeError();
  std::string T = dtype == DType::F32 ? "float" : "double";
  std::string header = fmt::format(
      "// {name}: generated by hsnn-jit for {arch}, {nodes} nodes, {dtype}{ofOrder}.\n"
      "// Kernels {name}_{{forward,backward,fused}}_{{nodes_major,batch_major}}, one launch for the whole layer:\n"
      "//   (const {T} *z, const {T} *err_or_null, {T} *out0, {T} *out1_or_null, const double *params,\n"
      "//    const uint32_t *unit_of, const uint64_t *param_offsets, int64_t batch, int64_t nodes, int64_t first_node)\n"
      "// forward: out0 = f(z); backward: out0 = err * f'(z); fused: out0 = f(z), out1 = f'(z).\n"
      "// nodes_major: grid.y = node count (at most 65535 per launch; node = first_node + blockIdx.y), x threads stride\n"
      "// over the batch; batch_major: a 1-D grid strides over batch * nodes (first_node unused).\n"
      "// unit_of = {{{units}}}\n"
      "// param_offsets = {{{offsets}}}\n"
      "// default_params = {{{params}}}\n",
      fmt::arg("name", name), fmt::arg("arch", arch), fmt::arg("nodes", model.numNodes()),
      fmt::arg("ofOrder", orderNote(order, "num")),
      fmt::arg("dtype", to_string(dtype)), fmt::arg("T", T), fmt::arg("units", commaList(model.unitOf)),
      fmt::arg("offsets", commaList(model.offsets)), fmt::arg("params", commaList(model.defaultParams)));
  for (size_t n = 0; n < model.numNodes(); ++n)
    header += fmt::format("//   node {}: unit {} = {}\n", n, model.unitOf[n], print(model.group(n).formula.expr));
  return header + *ptx;
}

Expected<std::string> compileLossPtx(const std::string &name, const std::string &formula,
                                     const std::map<std::string, double> &constants, DType dtype,
                                     const std::string &arch, int optLevel, unsigned order) {
  if (!isCIdentifier(name))
    return Error(ErrorCode::InvalidArgument, fmt::format("loss name '{}' is not a C identifier", name));
  auto derivation = detail::derivativeSteps(order);
  if (!derivation)
    return derivation.takeError();
  auto compiled = buildModel(formula, constants, {.dtype = dtype, .derivation = *derivation});
  if (!compiled)
    return compiled.takeError();
  const detail::CompiledModel &model = **compiled;
  detail::GpuModuleSpec spec;
  for (KernelKind k : detail::kLossKinds)
    spec.losses.push_back({fmt::format("{}_{}", name, detail::kindInfo(k).cName), model.units[0].programs[size_t(k)], k, dtype});
  spec.sumKernel = name + "_add_partials";
  auto ptx = detail::compilePtx(spec, {.arch = arch, .optLevel = optLevel});
  if (!ptx)
    return ptx.takeError();
  std::string T = dtype == DType::F32 ? "float" : "double";
  return fmt::format("// {name}: generated by hsnn-jit for {arch} from the loss {formula}\n"
                     "// {name}_{{elements,sum,gradient,fused}}(const {T} *yp, const {T} *yt, {T} *out, const double *params,\n"
                     "//     int64_t n, {T} scale, double *partials): sum and fused leave one partial per warp in\n"
                     "//     partials[(blockIdx.x * blockDim.x + threadIdx.x) / 32] (blockDim.x a multiple of 32);\n"
                     "// {name}_add_partials(const double *partials, int64_t count, double *result): one block of\n"
                     "//     min(1024, count rounded up to a multiple of 32) threads (any multiple of 32 up to 1024\n"
                     "//     works) adds them in an order fixed by count and the block size. default_params = {{{params}}}\n",
                     fmt::arg("name", name), fmt::arg("arch", arch), fmt::arg("formula", print(model.groups[0].formula.expr)),
                     fmt::arg("T", T), fmt::arg("params", commaList(model.defaultParams))) +
         *ptx;
}

} // namespace hsnn
