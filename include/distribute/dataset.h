// Dataset: an input pipeline in the style of tf.data.
//
// A Dataset is an immutable description of a sequence of Elements (a Tensor,
// or a tuple of Tensors such as (features, labels)). Transformations return
// new Datasets and leave the original unchanged; a Dataset may be copied
// cheaply and shared between threads. Iterating it (range-for, or
// make_iterator()) starts over from the beginning every time; shuffle()
// draws a new order for each iteration unless told otherwise.
//
//   auto ds = Dataset::from_tensor_slices({images, labels})
//                 .shuffle(1024, /*seed=*/42)
//                 .batch(256)
//                 .prefetch(2);
//   for (const Element& batch : ds) { ... batch[0] ... batch[1] ... }
//
// Iterators are single-consumer: one thread at a time calls get_next() on a
// given iterator. Functions passed to map/filter/from_generator may run on
// background threads (map with num_parallel_calls > 1, prefetch) and must be
// safe to call from any thread.
//
// Errors while iterating: an exception raised by a user function (map,
// filter, a generator) surfaces from the get_next() that would have returned
// the affected element, with its type preserved; that element is dropped and
// the iterator stays usable: the next get_next() continues with the
// following elements (a batch being built keeps the rows it already has).
// batch() of elements with different shapes raises InvalidArgumentError and
// drops the rows of that batch; the next batch starts after them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distribute/element.h"
#include "distribute/internal/input_range.h"
#include "distribute/tensor.h"

namespace distribute {

namespace internal {
class DatasetNode;
class ElementIterator;
}  // namespace internal

// TF's tf.TensorSpec: the dtype and shape of one component of a dataset's
// elements; a dimension of -1 is not known before iterating (TF's None).
struct TensorSpec {
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
  // "TensorSpec(shape=(None, 64), dtype=tf.float32, name=None)", as TF prints it.
  std::string to_string() const;
  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

// TF's Dataset.element_spec: the spec of every component of an element, and
// whether the element is a tuple (as Element::is_tuple).
struct ElementSpec {
  std::vector<TensorSpec> components;
  bool is_tuple = false;
  // One TensorSpec, or "(TensorSpec(...), TensorSpec(...))" for a tuple.
  std::string to_string() const;
  friend bool operator==(const ElementSpec&, const ElementSpec&) = default;
};

// TF's tf.data.experimental.AutoShardPolicy: how
// experimental_distribute_dataset divides a dataset among the workers of a
// multi-worker strategy (one worker: no effect).
//   AUTO  FILE for a dataset that reads a list of files (at least one per
//         worker), else DATA.
//   FILE  worker w reads files w, w + W, ... of the file source
//         (Dataset::from_csv_files, TextLineDataset, TFRecordDataset)
//         under the dataset's transformations; its
//         batches are then cut into its replicas' shares as one worker's
//         would be. InvalidArgumentError for a dataset without a file source
//         or with fewer files than workers.
//   DATA  every worker reads everything; each global batch is cut into
//         num_replicas_in_sync pieces of ceil(B/N) rows (TF's legacy rebatch)
//         and worker w keeps pieces w, w + W, ... (replica r of worker w gets
//         piece w + r*W).
//   OFF   no sharding: every worker sees the whole dataset.
// Set on the dataset (Dataset::with_options, as TF does) or, for one call,
// in InputOptions::auto_shard_policy.
enum class AutoShardPolicy { AUTO, FILE, DATA, OFF };

// TF's tf.data.Options, the fields this library reads. Unset fields take
// their defaults (or an outer with_options' value).
struct Options {
  struct Distribute {
    std::optional<AutoShardPolicy> auto_shard_policy;
  };
  Distribute experimental_distribute;
  // This options' set fields override `base`'s (TF's Options.merge).
  Options merged_over(const Options& base) const {
    Options out = base;
    if (experimental_distribute.auto_shard_policy) {
      out.experimental_distribute.auto_shard_policy = experimental_distribute.auto_shard_policy;
    }
    return out;
  }
};

// How load_csv and Dataset::from_csv_files read a CSV file.
struct CsvOptions {
  char delimiter = ',';
  // Skip the first line (column names).
  bool header = false;
};

class Dataset {
 public:
  // Produces the elements of one iteration, then std::nullopt.
  using Generator = std::function<std::optional<Element>()>;

  // tf.data.AUTOTUNE for prefetch and num_parallel_calls: let the library pick.
  static constexpr std::int64_t kAutotune = -1;

  // --- Sources -------------------------------------------------------------
  // The slices of `tensor` along axis 0 (zero-copy views). InvalidArgumentError for a scalar.
  static Dataset from_tensor_slices(const Tensor& tensor);
  // Tuple elements: slice i of every component. All components must have the
  // same size along axis 0 (InvalidArgumentError naming both otherwise).
  static Dataset from_tensor_slices(std::vector<Tensor> components);
  // One element.
  static Dataset from_tensors(Element element);
  // int64 scalars start, start + step, ... up to stop (excluded); step != 0.
  static Dataset range(std::int64_t stop);
  static Dataset range(std::int64_t start, std::int64_t stop, std::int64_t step = 1);
  // make() is called at the start of every iteration; the generator it returns
  // yields the elements until it returns std::nullopt.
  static Dataset from_generator(std::function<Generator()> make);
  // The rows of numeric CSV files, file after file (each a float64 vector;
  // a file is read, as load_csv reads it, when the iteration reaches it). A
  // source that reads a list of files: a multi-worker strategy's
  // experimental_distribute_dataset can shard it by files
  // (AutoShardPolicy::FILE, and AUTO). InvalidArgumentError for an empty list.
  static Dataset from_csv_files(std::vector<std::string> paths, CsvOptions options = {});
  // Elements of several datasets side by side (TF's Dataset.zip): element i
  // is a tuple of the components of element i of every input, in order (an
  // input's tuple is flattened into it: zip({(x, y), z}) gives (x, y, z)).
  // Ends with the shortest input. InvalidArgumentError for no inputs.
  static Dataset zip(std::vector<Dataset> datasets);

  // --- Transformations -----------------------------------------------------
  // Stacks `batch_size` consecutive elements component-wise (a new axis 0).
  // The last batch may be smaller unless drop_remainder. Elements of a batch
  // must have the same structure, shapes and dtypes. InvalidArgumentError for
  // batch_size <= 0. Stacking consecutive slices of one buffer is zero-copy.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  // Splits each element along axis 0 into its rows (the inverse of batch).
  Dataset unbatch() const;
  // batch() of elements whose shapes differ (TF's padded_batch): every
  // component is padded at the end of each dimension to padded_shapes[c]
  // (-1 in it, or no padded_shapes: to the largest size in the batch) with
  // padding_values[c] (default 0; one value: for every component; cast to
  // the component's dtype; string components get empty strings, and a
  // per-component value for one must be 0), then stacked. Elements must agree in
  // structure, dtype and rank. InvalidArgumentError for batch_size <= 0,
  // padded_shapes or padding_values of the wrong length or rank, or an
  // element larger than its padded shape (naming both).
  Dataset padded_batch(std::int64_t batch_size, std::vector<std::vector<std::int64_t>> padded_shapes = {},
                       std::vector<double> padding_values = {}, bool drop_remainder = false) const;
  // Applies fn to every element. With num_parallel_calls > 1 (or kAutotune:
  // one per CPU this process may use, usable_cpu_count()) up to that many
  // calls run at once on background threads; the output order is the input
  // order.
  Dataset map(std::function<Element(const Element&)> fn, std::int64_t num_parallel_calls = 1) const;
  // (index, element...) tuples with index = start, start + 1, ... as int64
  // scalars (TF's enumerate; the element's components follow the index).
  Dataset enumerate(std::int64_t start = 0) const;
  // The elements of fn(element) for every element, one dataset after the
  // other (TF's flat_map).
  Dataset flat_map(std::function<Dataset(const Element&)> fn) const;
  // TF's interleave: keeps cycle_length datasets fn(element) open and takes
  // block_length elements from each in turn; an exhausted one is replaced
  // by the next input element's dataset when the cycle comes back to it.
  // The order is always that one (TF's deterministic=True; TF may reorder
  // when told deterministic=false, this library does not). cycle_length
  // kAutotune: usable_cpu_count(). num_parallel_calls > 1 (or kAutotune)
  // reads every open dataset ahead on its own background thread (up to
  // block_length elements each). InvalidArgumentError for cycle_length,
  // block_length or num_parallel_calls < 1 (other than kAutotune).
  Dataset interleave(std::function<Dataset(const Element&)> fn, std::int64_t cycle_length = kAutotune,
                     std::int64_t block_length = 1, std::int64_t num_parallel_calls = 1) const;
  // Keeps the elements of the first complete iteration in memory; later
  // iterations read them from there instead of from the input (TF's
  // cache() without a file name). An iteration stopped before the end
  // fills nothing. Iterations that start before the cache is complete read
  // the input.
  Dataset cache() const;
  // The same elements with `options` (TF's with_options); the options of a
  // pipeline are its with_options calls merged, later ones winning.
  Dataset with_options(const Options& options) const;
  // The merged options of the pipeline (TF's Dataset.options()).
  Options options() const;
  // Keeps the elements for which predicate returns true.
  Dataset filter(std::function<bool(const Element&)> predicate) const;
  // Fills a buffer of buffer_size elements and emits a random one of it,
  // replacing it with the next input element (tf.data's shuffle). The same
  // seed gives the same order; with reshuffle_each_iteration every iteration
  // after the first draws a new order (deterministic for a seed too). Without
  // a seed the order is random. InvalidArgumentError for buffer_size <= 0.
  Dataset shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  // Repeats the dataset `count` times; count = -1 repeats forever (an empty
  // dataset stays empty).
  Dataset repeat(std::int64_t count = -1) const;
  // The first `count` elements (-1: all of them).
  Dataset take(std::int64_t count) const;
  // All but the first `count` elements (-1: none).
  Dataset skip(std::int64_t count) const;
  // Elements i with i % num_shards == index. InvalidArgumentError unless
  // num_shards >= 1 and 0 <= index < num_shards.
  Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  // A background thread keeps up to buffer_size elements ready (kAutotune:
  // 2; 0: no prefetching). Destroying the iterator stops the thread, also
  // when it waits on a full buffer.
  Dataset prefetch(std::int64_t buffer_size) const;
  // Re-splits the rows of the batched input into batches of the given sizes,
  // used cyclically (tf.data's rebatch: like unbatch().batch(), crossing the
  // input's batch boundaries). Zero sizes give empty batches. A final
  // smaller batch is kept unless drop_remainder.
  Dataset rebatch(std::vector<std::int64_t> batch_sizes, bool drop_remainder = false) const;
  Dataset rebatch(std::int64_t batch_size, bool drop_remainder = false) const;

  // The batch size of the last batch() (or rebatch() with one size) in the
  // pipeline, when transformations since keep it; std::nullopt when unknown
  // (TF's compute_batch_size).
  std::optional<std::int64_t> static_batch_size() const;
  // "Batch(2) <- TensorSlices" style description, for error messages and tests.
  std::string describe() const;

  // The dtype and shape of the elements' components (TF's element_spec).
  // Known without iterating after sources and shape-preserving or
  // -transforming steps (batch without drop_remainder gives a leading -1);
  // after a step whose output depends on a user function (map, flat_map,
  // interleave, from_generator) or on file contents (CSV), the structure,
  // dtypes and ranks are read from the first element that step produces,
  // on a private copy of the pipeline (this dataset's shuffle counters and
  // caches do not change, but the functions, and a generator's factory,
  // run once more for that element), and every dimension is -1 (later
  // elements may differ). FailedPreconditionError when that step produces
  // no element (an empty dataset or shard), where TF would still know it.
  ElementSpec element_spec() const;

  // The number of elements, when known without iterating (TF's
  // Dataset.cardinality()): kInfiniteCardinality for a repeat() without a
  // count (of a non-empty input), kUnknownCardinality when it depends on the
  // data (filter, from_generator, CSV files, unbatch, rebatch, a take or
  // skip of an unknown count).
  static constexpr std::int64_t kInfiniteCardinality = -1;
  static constexpr std::int64_t kUnknownCardinality = -2;
  std::int64_t cardinality() const;

  // --- Iteration -----------------------------------------------------------
  class Iterator {
   public:
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();

    // The next element; OutOfRangeError ("End of sequence") at the end.
    Element get_next();
    // The next element, or std::nullopt at the end (and after it).
    std::optional<Element> get_next_as_optional();

   private:
    friend class Dataset;
    explicit Iterator(std::unique_ptr<internal::ElementIterator> impl);
    std::unique_ptr<internal::ElementIterator> impl_;
  };

  // A fresh iterator, at the start of the dataset.
  Iterator make_iterator() const;

  // Range-for support: `for (const Element& e : dataset)`; each loop is a
  // new iteration.
  using RangeIterator = internal::InputRange<Iterator, Element>;
  RangeIterator begin() const;
  RangeIterator end() const { return {}; }

  explicit Dataset(std::shared_ptr<const internal::DatasetNode> node);
  const std::shared_ptr<const internal::DatasetNode>& node() const noexcept { return node_; }

 private:
  std::shared_ptr<const internal::DatasetNode> node_;
};

// --- Files ---------------------------------------------------------------

// How TextLineDataset and TFRecordDataset read their files (TF's arguments
// of the same names).
struct ReaderOptions {
  // "" (uncompressed files; TF's None), "ZLIB" or "GZIP" (every file
  // compressed so; gzip members one after the other are one stream).
  // Damaged or cut compressed data raises DataLossError naming the file;
  // a TFRecord error's offset counts decompressed bytes. Any other value:
  // InvalidArgumentError.
  std::string compression_type;
  // Bytes read from a file at once (0: 256 KiB; at most 2^30, else
  // InvalidArgumentError).
  std::int64_t buffer_size = 0;
  // 0 (TF's None) or 1: the files one after the other. N > 1: N files are
  // open at once and their records interleaved one at a time, in TF's
  // order (Dataset::interleave with cycle_length N, block_length 1); each
  // open file is read ahead on its own thread. Dataset::kAutotune: one
  // file per usable CPU.
  std::int64_t num_parallel_reads = 0;
};

// TF's tf.data.TextLineDataset: the lines of the files, file after file, as
// string scalars, without their '\n' and with every '\r' dropped (so
// "a\r\nb" gives "a", "b"); empty lines are elements too, a last line
// without '\n' is one unless empty, an empty file gives none. A file is
// opened when the iteration reaches it (NotFoundError naming it then).
// A source that reads a list of files: a multi-worker strategy's
// experimental_distribute_dataset shards it by files (AutoShardPolicy::FILE,
// and AUTO). InvalidArgumentError for an empty list.
Dataset TextLineDataset(std::vector<std::string> filenames, ReaderOptions options = {});

// TF's tf.data.TFRecordDataset: the records of TFRecord files (each a
// string scalar), file after file. Every record's two masked CRC32Cs are
// checked: DataLossError naming the file and the record's byte offset for a
// checksum that does not match or a file that ends inside a record; the
// iteration then goes on with the next file (as TF's). Sharded by files as
// TextLineDataset. InvalidArgumentError for an empty list.
Dataset TFRecordDataset(std::vector<std::string> filenames, ReaderOptions options = {});

// Reads a numeric CSV file into a float64 Tensor of shape [rows, columns].
// Every line must have the same number of fields. Raises NotFoundError when
// the file cannot be opened and InvalidArgumentError naming the file, line
// and field for a malformed line.
Tensor load_csv(const std::string& path, const CsvOptions& options = {});

// The handwritten-digits data set shipped with the project (1797 8x8 images,
// UCI / scikit-learn; see data/README.md): images float32 [N, 64] with pixel
// values 0..16, labels int32 [N] in 0..9.
struct Digits {
  Tensor images;
  Tensor labels;
};
// Loads it from `path` (default: default_digits_path()).
Digits load_digits(const std::string& path);
Digits load_digits();
// The installed data/digits.csv, or the source tree's when running from a
// build tree.
std::string default_digits_path();

}  // namespace distribute
