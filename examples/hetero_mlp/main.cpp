// hetero_mlp: trains a small heterogeneous MLP on a synthetic regression task.
// Two hidden layers of 64 nodes whose activations cycle through several
// formulas (some with constants); hsnn computes the activations, their
// derivatives and the loss gradient; the dense layers are plain loops.
// The formulas' constants are trained too (sin's amplitude, elu's alpha, a
// PReLU-style slope per node) from hsnn's d/dc kernels.
// Exits with status 1 unless the loss falls at least 10x.
#include <hsnn/Layer.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr size_t kIn = 8, kHidden = 64, kSamples = 1024, kEpochs = 300;

using Matrix = std::vector<float>; // row-major

// out (n x m) = in (n x k) * w (k x m) + bias (m)
void dense(const Matrix &in, const Matrix &w, const Matrix &bias, Matrix &out, size_t n, size_t k, size_t m) {
  out.assign(n * m, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    float *o = &out[i * m];
    for (size_t j = 0; j < m; ++j)
      o[j] = bias[j];
    for (size_t p = 0; p < k; ++p) {
      float a = in[i * k + p];
      const float *wr = &w[p * m];
      for (size_t j = 0; j < m; ++j)
        o[j] += a * wr[j];
    }
  }
}

// Gradients of dense(): dW = in^T dOut, dB = sum dOut, dIn = dOut W^T.
void denseBackward(const Matrix &in, const Matrix &w, const Matrix &dOut, Matrix &dW, Matrix &dB, Matrix *dIn, size_t n,
                   size_t k, size_t m) {
  dW.assign(k * m, 0.0f);
  dB.assign(m, 0.0f);
  if (dIn)
    dIn->assign(n * k, 0.0f);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j) {
      float g = dOut[i * m + j];
      dB[j] += g;
      for (size_t p = 0; p < k; ++p) {
        dW[p * m + j] += in[i * k + p] * g;
        if (dIn)
          (*dIn)[i * k + p] += g * w[p * m + j];
      }
    }
}

struct Adam {
  std::vector<double> m, v;
  template <class T> void step(std::vector<T> &param, const std::vector<T> &grad, int t, double lr = 3e-3) {
    m.resize(param.size()), v.resize(param.size());
    for (size_t i = 0; i < param.size(); ++i) {
      m[i] = 0.9 * m[i] + 0.1 * double(grad[i]);
      v[i] = 0.999 * v[i] + 0.001 * double(grad[i]) * double(grad[i]);
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      param[i] -= T(lr * mh / (std::sqrt(vh) + 1e-8));
    }
  }
};

// One optimiser step on a layer's constants: dL/dc from hsnn, then setParams.
bool stepConstants(hsnn::ActivationLayer &layer, const Matrix &z, const Matrix &err, Adam &adam, int t) {
  std::vector<double> params = layer.params(), grads(params.size());
  if (auto e = layer.constantGradients(z, err, grads, kSamples); e)
    return std::fprintf(stderr, "%s\n", e.message().c_str()), false;
  adam.step(params, grads, t);
  if (auto e = layer.setParams(params); e)
    return std::fprintf(stderr, "%s\n", e.message().c_str()), false;
  return true;
}

std::vector<hsnn::NodeSpec> hiddenLayer(float scale) {
  const std::vector<hsnn::NodeSpec> cycle = {
      {"tanh", {}}, {"sin(num)*alpha", {{"alpha", scale}}}, {"softplus", {}}, {"gelu", {}},
      {"num/(1 + Abs(num))", {}}, {"elu", {{"alpha", 0.5}}}, {"swish", {}},
      {"Piecewise((num, num > 0), (beta*num, True))", {{"beta", 0.1}}}};
  std::vector<hsnn::NodeSpec> nodes;
  for (size_t j = 0; j < kHidden; ++j)
    nodes.push_back(cycle[j % cycle.size()]);
  return nodes;
}

} // namespace

int main() {
  std::mt19937 rng(1234);
  std::normal_distribution<float> gauss(0, 1);
  Matrix x(kSamples * kIn), y(kSamples);
  for (size_t i = 0; i < kSamples; ++i) {
    float t = 0;
    for (size_t p = 0; p < kIn; ++p) {
      x[i * kIn + p] = gauss(rng);
      t += std::sin(float(p + 1) * 0.5f * x[i * kIn + p]) / float(p + 1);
    }
    y[i] = t + 0.3f * x[i * kIn] * x[i * kIn + 1];
  }
  auto init = [&](size_t k, size_t m) {
    Matrix w(k * m);
    for (float &v : w)
      v = gauss(rng) / std::sqrt(float(k));
    return w;
  };
  Matrix w1 = init(kIn, kHidden), b1(kHidden), w2 = init(kHidden, kHidden), b2(kHidden), w3 = init(kHidden, 1), b3(1);

  // Batch-major layers: rows are samples, as the dense layers produce them.
  auto opts = hsnn::LayerOptions{.dtype = hsnn::DType::F32, .layout = hsnn::Layout::BatchMajor};
  auto layer1 = hsnn::ActivationLayer::compile(hiddenLayer(1.0f), opts);
  auto layer2 = hsnn::ActivationLayer::compile(hiddenLayer(0.5f), opts);
  auto loss = hsnn::Loss::compile("mse", {}, {.dtype = hsnn::DType::F32, .reduction = hsnn::Reduction::Mean});
  if (!layer1 || !layer2 || !loss) {
    std::fprintf(stderr, "%s\n", (!layer1 ? layer1.error() : !layer2 ? layer2.error() : loss.error()).message().c_str());
    return 1;
  }
  std::printf("layers: %zu + %zu nodes, %zu distinct formulas each, method %s\n", layer1->numNodes(),
              layer2->numNodes(), layer1->numDistinctFormulas(), std::string(hsnn::to_string(layer1->method())).c_str());

  Adam a1, a2, a3, c1, c2, c3, k1, k2;
  Matrix z1, h1, z2, h2, out, grad(kSamples), d2, dz2, d1, dz1, gw, gb;
  double first = 0, last = 0;
  for (size_t epoch = 1; epoch <= kEpochs; ++epoch) {
    dense(x, w1, b1, z1, kSamples, kIn, kHidden);
    h1.resize(z1.size());
    if (auto e = layer1->forward(z1, h1, kSamples); e)
      return std::fprintf(stderr, "%s\n", e.message().c_str()), 1;
    dense(h1, w2, b2, z2, kSamples, kHidden, kHidden);
    h2.resize(z2.size());
    (void)layer2->forward(z2, h2, kSamples);
    dense(h2, w3, b3, out, kSamples, kHidden, 1);
    auto l = loss->fused({out.data(), kSamples}, {y.data(), kSamples}, {grad.data(), kSamples}); // loss and d/dy_pred (scaled by 1/N)
    if (!l)
      return std::fprintf(stderr, "%s\n", l.error().message().c_str()), 1;
    if (epoch == 1)
      first = *l;
    last = *l;
    if (epoch == 1 || epoch % 30 == 0)
      std::printf("epoch %3zu  loss %.6f\n", epoch, *l);

    int t = int(epoch);
    denseBackward(h2, w3, grad, gw, gb, &d2, kSamples, kHidden, 1);
    a3.step(w3, gw, t), c3.step(b3, gb, t);
    dz2.resize(d2.size());
    (void)layer2->backward(z2, d2, dz2, kSamples); // delta = err * f'(z)
    if (!stepConstants(*layer2, z2, d2, k2, t))    // dL/dc = sum over the batch of err * df/dc
      return 1;
    denseBackward(h1, w2, dz2, gw, gb, &d1, kSamples, kHidden, kHidden);
    a2.step(w2, gw, t), c2.step(b2, gb, t);
    dz1.resize(d1.size());
    (void)layer1->backward(z1, d1, dz1, kSamples);
    if (!stepConstants(*layer1, z1, d1, k1, t))
      return 1;
    denseBackward(x, w1, dz1, gw, gb, nullptr, kSamples, kIn, kHidden);
    a1.step(w1, gw, t), c1.step(b1, gb, t);
  }
  std::printf("loss fell from %.6f to %.6f (%.1fx)\n", first, last, first / last);
  for (size_t node : {1, 7})
    for (const std::string &name : layer1->constantNames(node))
      std::printf("layer 1 node %zu (%s): %s trained to %.4f\n", node, layer1->formula(node).c_str(), name.c_str(),
                  layer1->constant(node, name).value());
  return first / last >= 10 ? 0 : 1;
}
