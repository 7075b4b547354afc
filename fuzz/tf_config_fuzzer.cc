// Fuzzes the TF_CONFIG parser, parse_tf_config(), and what is asked of the
// resolver it returns. A distribute::Error is the expected outcome of bad
// text; anything else (another exception, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "distribute/cluster_resolver.h"
#include "distribute/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const distribute::TFConfigClusterResolver resolver = distribute::parse_tf_config(text);
    (void)resolver.is_chief();
    (void)resolver.collective_leader();
    try {
      const int workers = resolver.num_workers();
      const int id = resolver.id_in_cluster();
      if (workers < 1 || id < 0 || id >= workers) __builtin_trap();
    } catch (const distribute::Error&) {  // a "ps" task
    }
    // As MultiWorkerMirroredStrategy's constructor reads it.
    const distribute::ClusterEnvironment env = distribute::read_cluster_environment(
        [&](const std::string& name) -> std::optional<std::string> {
          if (name == "TF_CONFIG") return std::string(text);
          return std::nullopt;
        });
    (void)distribute::reconcile_cluster(env, 0, 1);
  } catch (const distribute::Error&) {
  }
  return 0;
}
