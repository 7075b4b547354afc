// The README's example, built against the installed package as a user
// would; exits non-zero when the sums differ from the README's. Also saves
// and restores a checkpoint, so that the link needs every dependency the
// package declares (ISA-L for the checkpoint CRC32C), and parses a
// tf.train.Example (protobuf-lite) and reads a GZIP file (zlib).
#include <distribute/distribute.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

namespace dist = distribute;

int main() {
  dist::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  auto dataset = dist::Dataset::from_tensor_slices({5.f, 6.f, 7.f, 8.f}).batch(2);
  std::vector<dist::Tensor> sums;
  for (const auto& batch : strategy.experimental_distribute_dataset(dataset)) {
    auto plus_one = strategy.run([](const dist::Tensor& x) { return x + 1.f; }, batch);
    sums.push_back(strategy.reduce(dist::ReduceOp::SUM, plus_one, /*axis=*/0));
    std::cout << "consumer: " << sums.back() << "\n";
  }
  const bool ok = sums.size() == 2 && sums[0] == dist::Tensor(13.f) && sums[1] == dist::Tensor(17.f) &&
                  dist::load_digits().images.shape() == dist::Shape{1797, 64};

  const auto dir = std::filesystem::temp_directory_path() / "distribute_consumer_ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::int64_t step = 7;
  dist::Checkpoint ckpt;
  ckpt.track("step", &step);
  const std::string path = ckpt.save(dir.string());
  step = 0;
  ckpt.restore(path);
  std::filesystem::remove_all(dir);
  std::cout << "consumer: checkpoint restored step " << step << "\n";

  // Example{features{feature{key: "k" value{int64_list{value: 5}}}}}, by hand.
  const std::string example("\x0a\x0c\x0a\x0a\x0a\x01k\x12\x05\x1a\x03\x0a\x01\x05", 14);
  const auto parsed = dist::parse_single_example(dist::Tensor(example), {{"k", {{}, dist::DType::kInt64, {}}}});
  std::cout << "consumer: parsed " << parsed.at("k") << "\n";
  const bool parsed_ok = parsed.at("k") == dist::Tensor(std::int64_t{5});

  // A GZIP text file (zlib): an empty file is an empty stream.
  const auto empty = std::filesystem::temp_directory_path() / "distribute_consumer_empty.gz";
  { std::ofstream touch(empty); }
  std::int64_t lines = 0;
  for (const auto& line : dist::TextLineDataset({empty.string()}, {.compression_type = "GZIP"})) {
    (void)line;
    ++lines;
  }
  std::filesystem::remove(empty);
  std::cout << "consumer: " << lines << " lines in an empty GZIP file\n";
  return ok && step == 7 && parsed_ok && lines == 0 ? 0 : 1;
}
