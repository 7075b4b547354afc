#include "mlp_kernels.h"

#include <cstdlib>

#include "distribute/errors.h"

namespace distribute::train::kernels {
namespace baseline {
extern const Table kTable;
}
#ifdef DISTRIBUTE_TRAIN_HAVE_AVX2
namespace avx2_fma {
extern const Table kTable;
}
#endif

namespace {

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace

std::vector<const Table*> available() {
  std::vector<const Table*> tables{&baseline::kTable};
#ifdef DISTRIBUTE_TRAIN_HAVE_AVX2
  if (cpu_has_avx2_fma()) tables.push_back(&avx2_fma::kTable);
#endif
  return tables;
}

const Table& choose(const std::string& requested) {
  const std::vector<const Table*> tables = available();
  if (requested.empty()) return *tables.back();
  if (requested == "baseline") return *tables.front();
  if (requested == "avx2") {
    if (tables.back()->isa == std::string("avx2+fma")) return *tables.back();
    throw InvalidArgumentError(
        "DISTRIBUTE_TRAIN_ISA=avx2, but this CPU or build has no AVX2+FMA kernels (available: baseline)");
  }
  throw InvalidArgumentError("DISTRIBUTE_TRAIN_ISA must be 'baseline' or 'avx2', got '" + requested + "'");
}

const Table& active() {
  static const Table* const table = [] {
    const char* env = std::getenv("DISTRIBUTE_TRAIN_ISA");
    return &choose(env != nullptr ? env : "");
  }();
  return *table;
}

}  // namespace distribute::train::kernels
