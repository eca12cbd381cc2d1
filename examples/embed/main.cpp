// embed: the shortest C++ program that compiles a heterogeneous layer and runs it.
#include <hsnn/Layer.h>

#include <cstdio>
#include <vector>

int main() {
  auto layer = hsnn::ActivationLayer::compile(
      {{"sin(num)*alpha", {{"alpha", 2.0}}}, {"relu", {}}, {"gelu", {}}},
      {.dtype = hsnn::DType::F32, .layout = hsnn::Layout::NodesMajor});
  if (!layer) {
    std::fprintf(stderr, "%s\n", layer.error().message().c_str()); // every node's errors, with carets
    return 1;
  }
  const size_t batch = 4; // (nodes x batch): each node's batch is contiguous
  std::vector<float> z = {-1, 0, 0.5f, 2, -1, 0, 0.5f, 2, -1, 0, 0.5f, 2}, a(z.size()), err(z.size(), 1.0f), delta(z.size());
  if (auto e = layer->forward(z, a, batch); e)
    return std::fprintf(stderr, "%s\n", e.message().c_str()), 1;
  if (auto e = layer->backward(z, err, delta, batch); e)
    return std::fprintf(stderr, "%s\n", e.message().c_str()), 1;
  std::printf("method: %s\n", std::string(hsnn::to_string(layer->method())).c_str());
  for (size_t n = 0; n < layer->numNodes(); ++n) {
    std::printf("node %zu: %s, derivative %s\n", n, layer->formula(n).c_str(), layer->derivative(n).c_str());
    for (size_t b = 0; b < batch; ++b)
      std::printf("  z = %5.2f  a = %9.6f  delta = %9.6f\n", z[n * batch + b], a[n * batch + b], delta[n * batch + b]);
  }
  return 0;
}
