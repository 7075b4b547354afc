// distribute-train's learning-curve plot (--plot FILE.png), drawn with cairo.
//
// Two panels over a shared epoch axis: the training loss on top, the
// training and test accuracy below, each with ticks, a grid, axis labels and
// a legend, under a title. Text uses DejaVu Sans (Debian: fonts-dejavu-core)
// through FreeType directly, not fontconfig, so that no process-wide font
// cache is left unreachable (the tests run under LeakSanitizer).
//
// Thread-safe: calls may run concurrently (the font is loaded once and
// shared; each call has its own cairo surface).
#pragma once

#include <string>
#include <vector>

namespace distribute::train {

struct CurvePoint {
  int epoch = 0;  // 1-based
  double loss = 0;
  double accuracy = 0;
  double test_accuracy = 0;
};

struct PlotOptions {
  // Image size in pixels, each within 320..8192 (width) and 240..8192 (height).
  int width = 960;
  int height = 720;
  std::string title = "distribute-train learning curve";
};

// Writes the plot of `points` to `path` as a PNG: to a temporary file in the
// same directory first, renamed over `path` once complete, so that a failed
// call leaves neither a partial file nor the temporary one. A non-finite
// value (a diverged loss) is left out and breaks its line.
//
// Raises InvalidArgumentError for an empty path, no points, epochs not
// strictly increasing or a size out of range; FailedPreconditionError when
// the file cannot be created there (missing directory, no permission) or the
// font is missing; UnavailableError when writing it fails midway.
void write_learning_curve_png(const std::string& path, const std::vector<CurvePoint>& points,
                              const PlotOptions& options = {});

}  // namespace distribute::train
