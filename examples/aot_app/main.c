/* aot_app: a plain C program linked against a layer compiled ahead of time by
 * `hsnn-jit compile` (no LLVM, TBB or hsnn at link time). Prints, for every
 * node and a few inputs, f(z) and f'(z) so they can be checked against
 * `hsnn-jit eval`. Built once per layout and dtype (see CMakeLists.txt). */
#include LAYER_HEADER

#include <stdio.h>
#include <stdlib.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(suffix) CAT(LAYER, suffix)

static const double inputs[] = {-3.0, -1.25, -0.5, 0.0, 0.3, 1.0, 2.5};
#define BATCH ((int64_t)(sizeof inputs / sizeof inputs[0]))

int main(void) {
  const int64_t nodes = NUM_NODES;
  typedef ELEM_T T;
  T *z = malloc(sizeof(T) * nodes * BATCH), *a = malloc(sizeof(T) * nodes * BATCH), *d = malloc(sizeof(T) * nodes * BATCH);
  if (!z || !a || !d)
    return 1;
  for (int64_t n = 0; n < nodes; ++n)
    for (int64_t b = 0; b < BATCH; ++b)
      z[BATCH_MAJOR ? b * nodes + n : n * BATCH + b] = (T)inputs[b];
  /* Two halves through the _range form, as a parallel caller would. */
  FN(_fused_range)(z, a, d, BATCH, FN(_default_params), 0, nodes / 2);
  FN(_fused_range)(z, a, d, BATCH, FN(_default_params), nodes / 2, nodes);
  for (int64_t n = 0; n < nodes; ++n)
    for (int64_t b = 0; b < BATCH; ++b) {
      int64_t i = BATCH_MAJOR ? b * nodes + n : n * BATCH + b;
      printf("%lld %.17g %.17g %.17g\n", (long long)n, inputs[b], (double)a[i], (double)d[i]);
    }
  /* forward alone must agree with the fused kernel's first output */
  T *a2 = malloc(sizeof(T) * nodes * BATCH);
  FN(_forward)(z, a2, BATCH, FN(_default_params));
  for (int64_t i = 0; i < nodes * BATCH; ++i)
    if (a2[i] != a[i] && !(a2[i] != a2[i] && a[i] != a[i])) {
      fprintf(stderr, "forward and fused disagree at %lld\n", (long long)i);
      return 1;
    }
  free(z), free(a), free(d), free(a2);
  return 0;
}
