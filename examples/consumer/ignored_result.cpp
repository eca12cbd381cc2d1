// Drops results of the API; with -Werror this file must fail to compile.
#include <hsnn/Layer.h>

#include <vector>

void dropsResults(const hsnn::ActivationLayer &layer, const hsnn::Loss &loss) {
  std::vector<float> z(4), a(4);
  layer.forward(z, a, 4);           // ignored Error
  loss.forward(z, a);               // ignored Expected<double>
  hsnn::ActivationLayer::compile({}); // ignored Expected<ActivationLayer>
}
