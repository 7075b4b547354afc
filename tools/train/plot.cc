#include "plot.h"

#include <cairo-ft.h>
#include <cairo.h>
#include <fcntl.h>
#include <ft2build.h>
#include <unistd.h>
#include FT_FREETYPE_H

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <numbers>
#include <string_view>
#include <system_error>

#include "distribute/errors.h"

#ifndef DISTRIBUTE_TRAIN_FONT
#define DISTRIBUTE_TRAIN_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
#endif

namespace distribute::train {
namespace {

// ---- The font: loaded once, kept for the life of the process. ----

struct Font {
  FT_Library library = nullptr;
  FT_Face face = nullptr;
  cairo_font_face_t* cairo = nullptr;
  std::string error;  // non-empty: loading failed
};

cairo_font_face_t* font() {
  // Never freed: cairo's caches may hold the face until exit, and the
  // statics keep it reachable for LeakSanitizer.
  static const Font loaded = [] {
    Font f;
    const std::string path = DISTRIBUTE_TRAIN_FONT;
    if (const FT_Error e = FT_Init_FreeType(&f.library); e != 0) {
      f.error = "FreeType initialization failed (FreeType error " + std::to_string(e) + ")";
    } else if (const FT_Error e2 = FT_New_Face(f.library, path.c_str(), 0, &f.face); e2 != 0) {
      f.error = "cannot load the font '" + path + "' (Debian package fonts-dejavu-core), FreeType error " +
                std::to_string(e2);
    } else {
      f.cairo = cairo_ft_font_face_create_for_ft_face(f.face, 0);
      if (cairo_font_face_status(f.cairo) != CAIRO_STATUS_SUCCESS) {
        f.error = std::string("cairo cannot use the font '") + path +
                  "': " + cairo_status_to_string(cairo_font_face_status(f.cairo));
      }
    }
    return f;
  }();
  if (!loaded.error.empty()) throw FailedPreconditionError("write_learning_curve_png: " + loaded.error);
  return loaded.cairo;
}

// ---- Axes ----

struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 0.2;
  int decimals = 1;
  double map(double v, double from, double to) const { return from + (v - lo) / (hi - lo) * (to - from); }
};

double nice_step(double range, int max_ticks) {
  const double raw = range / std::max(1, max_ticks);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
}

int decimals_for(double step) { return std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))); }

// An axis over [lo, hi] widened to multiples of a 1-2-5 step.
Axis value_axis(double lo, double hi, int max_ticks) {
  if (!(lo <= hi)) return {};  // no finite value: 0..1
  if (hi - lo < 1e-12) {
    const double pad = std::max(std::abs(lo) * 0.1, 0.05);
    lo -= pad;
    hi += pad;
  }
  Axis axis;
  axis.step = nice_step(hi - lo, max_ticks);
  axis.lo = std::floor(lo / axis.step + 1e-9) * axis.step;
  axis.hi = std::ceil(hi / axis.step - 1e-9) * axis.step;
  axis.decimals = decimals_for(axis.step);
  return axis;
}

// The epoch axis: exactly the epochs run, whole-number ticks.
Axis epoch_axis(int first, int last, int max_ticks) {
  Axis axis;
  axis.lo = first == last ? first - 1 : first;
  axis.hi = first == last ? last + 1 : last;
  axis.step = std::max(1.0, nice_step(axis.hi - axis.lo, max_ticks));
  axis.decimals = 0;
  return axis;
}

std::vector<double> ticks(const Axis& axis) {
  std::vector<double> out;
  for (double k = std::ceil(axis.lo / axis.step - 1e-9);; ++k) {
    const double v = k * axis.step;
    if (v > axis.hi + axis.step * 1e-9) break;
    out.push_back(std::abs(v) < axis.step * 1e-9 ? 0.0 : v);
  }
  return out;
}

std::string format_tick(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

// ---- Drawing ----

struct Rgb {
  double r, g, b;
};
constexpr Rgb kBlue{0.12, 0.47, 0.71};
constexpr Rgb kOrange{1.00, 0.50, 0.05};
constexpr Rgb kGreen{0.17, 0.63, 0.17};
constexpr Rgb kText{0.10, 0.10, 0.10};
constexpr Rgb kGrid{0.88, 0.88, 0.88};
constexpr Rgb kFrame{0.35, 0.35, 0.35};

void set_color(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

struct Rect {
  double x, y, w, h;
};

// Draws `text` with its anchor at (x, y): ax 0 left / 0.5 center / 1 right,
// ay 0 top / 0.5 middle / 1 bottom of the font's ascent..descent box.
void draw_text(cairo_t* cr, std::string_view text, double x, double y, double ax, double ay) {
  const std::string s(text);
  cairo_text_extents_t te;
  cairo_text_extents(cr, s.c_str(), &te);
  cairo_font_extents_t fe;
  cairo_font_extents(cr, &fe);
  const double box = fe.ascent + fe.descent;
  cairo_move_to(cr, x - ax * te.x_advance, y - ay * box + fe.ascent);
  cairo_show_text(cr, s.c_str());
}

// Markers on the points only while they stay apart.
bool markers(std::size_t points) { return points <= 60; }

struct Series {
  std::string label;
  Rgb color;
  std::vector<double> values;  // one per point; non-finite: left out
};

void draw_series(cairo_t* cr, const Rect& r, const Axis& x, const Axis& y, const std::vector<double>& epochs,
                 const Series& s, double scale) {
  set_color(cr, s.color);
  cairo_set_line_width(cr, 2.0 * scale);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  bool open = false;
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    if (!std::isfinite(s.values[i])) {
      open = false;
      continue;
    }
    const double px = x.map(epochs[i], r.x, r.x + r.w);
    const double py = y.map(s.values[i], r.y + r.h, r.y);
    if (open) {
      cairo_line_to(cr, px, py);
    } else {
      cairo_move_to(cr, px, py);
    }
    open = true;
  }
  cairo_stroke(cr);
  if (!markers(epochs.size())) return;
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    if (!std::isfinite(s.values[i])) continue;
    cairo_new_sub_path(cr);
    cairo_arc(cr, x.map(epochs[i], r.x, r.x + r.w), y.map(s.values[i], r.y + r.h, r.y), 3.2 * scale, 0,
              2 * std::numbers::pi);
  }
  cairo_fill(cr);
}

void draw_legend(cairo_t* cr, const Rect& r, const std::vector<Series>& series, bool top, bool with_markers,
                 double scale) {
  cairo_set_font_size(cr, 13 * scale);
  double label_w = 0;
  for (const Series& s : series) {
    cairo_text_extents_t te;
    cairo_text_extents(cr, s.label.c_str(), &te);
    label_w = std::max(label_w, te.x_advance);
  }
  const double pad = 8 * scale, sample = 26 * scale, row = 20 * scale;
  const double w = pad + sample + 6 * scale + label_w + pad;
  const double h = pad + row * static_cast<double>(series.size()) + pad - 4 * scale;
  const double bx = r.x + r.w - w - 10 * scale;
  const double by = top ? r.y + 10 * scale : r.y + r.h - h - 10 * scale;
  cairo_rectangle(cr, bx, by, w, h);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
  cairo_fill_preserve(cr);
  set_color(cr, kFrame);
  cairo_set_line_width(cr, 1.0 * scale);
  cairo_stroke(cr);
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double cy = by + pad + row * (static_cast<double>(i) + 0.5) - 2 * scale;
    set_color(cr, series[i].color);
    cairo_set_line_width(cr, 2.0 * scale);
    cairo_move_to(cr, bx + pad, cy);
    cairo_line_to(cr, bx + pad + sample, cy);
    cairo_stroke(cr);
    if (with_markers) {
      cairo_arc(cr, bx + pad + sample / 2, cy, 3.2 * scale, 0, 2 * std::numbers::pi);
      cairo_fill(cr);
    }
    set_color(cr, kText);
    draw_text(cr, series[i].label, bx + pad + sample + 6 * scale, cy, 0, 0.5);
  }
}

// One panel: grid, frame, y ticks and label, x ticks (labelled when
// `x_labels`), the series and their legend.
void draw_panel(cairo_t* cr, const Rect& r, const Axis& x, const Axis& y, const std::vector<double>& epochs,
                const std::vector<Series>& series, const std::string& y_label, bool x_labels, bool legend_top,
                double scale) {
  cairo_set_line_width(cr, 1.0 * scale);
  set_color(cr, kGrid);
  for (double v : ticks(x)) {
    const double px = std::round(x.map(v, r.x, r.x + r.w)) + 0.5;
    cairo_move_to(cr, px, r.y);
    cairo_line_to(cr, px, r.y + r.h);
  }
  for (double v : ticks(y)) {
    const double py = std::round(y.map(v, r.y + r.h, r.y)) + 0.5;
    cairo_move_to(cr, r.x, py);
    cairo_line_to(cr, r.x + r.w, py);
  }
  cairo_stroke(cr);

  set_color(cr, kFrame);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
  const double tick = 5 * scale;
  cairo_set_font_size(cr, 13 * scale);
  for (double v : ticks(x)) {
    const double px = x.map(v, r.x, r.x + r.w);
    set_color(cr, kFrame);
    cairo_move_to(cr, px, r.y + r.h);
    cairo_line_to(cr, px, r.y + r.h + tick);
    cairo_stroke(cr);
    if (x_labels) {
      set_color(cr, kText);
      draw_text(cr, format_tick(v, x.decimals), px, r.y + r.h + tick + 2 * scale, 0.5, 0);
    }
  }
  double widest = 0;
  for (double v : ticks(y)) {
    const double py = y.map(v, r.y + r.h, r.y);
    set_color(cr, kFrame);
    cairo_move_to(cr, r.x - tick, py);
    cairo_line_to(cr, r.x, py);
    cairo_stroke(cr);
    set_color(cr, kText);
    const std::string text = format_tick(v, y.decimals);
    cairo_text_extents_t te;
    cairo_text_extents(cr, text.c_str(), &te);
    widest = std::max(widest, te.x_advance);
    draw_text(cr, text, r.x - tick - 3 * scale, py, 1, 0.5);
  }
  // The axis label, turned a quarter left, beside the tick labels.
  cairo_save(cr);
  cairo_set_font_size(cr, 15 * scale);
  cairo_translate(cr, r.x - tick - 3 * scale - widest - 10 * scale, r.y + r.h / 2);
  cairo_rotate(cr, -std::numbers::pi / 2);
  set_color(cr, kText);
  draw_text(cr, y_label, 0, 0, 0.5, 1);
  cairo_restore(cr);

  cairo_save(cr);
  cairo_rectangle(cr, r.x - 6 * scale, r.y - 6 * scale, r.w + 12 * scale, r.h + 12 * scale);
  cairo_clip(cr);
  for (const Series& s : series) draw_series(cr, r, x, y, epochs, s, scale);
  cairo_restore(cr);
  draw_legend(cr, r, series, legend_top, markers(epochs.size()), scale);
}

// ---- Writing ----

using SurfacePtr = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using ContextPtr = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

struct Sink {
  int fd = -1;
  int error = 0;
};

cairo_status_t write_chunk(void* closure, const unsigned char* data, unsigned int length) {
  auto* sink = static_cast<Sink*>(closure);
  while (length > 0) {
    const ssize_t n = ::write(sink->fd, data, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      sink->error = errno;
      return CAIRO_STATUS_WRITE_ERROR;
    }
    data += n;
    length -= static_cast<unsigned int>(n);
  }
  return CAIRO_STATUS_SUCCESS;
}

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

void check_cairo(cairo_status_t status, const char* what) {
  if (status != CAIRO_STATUS_SUCCESS) {
    throw InternalError(std::string("write_learning_curve_png: ") + what + ": " + cairo_status_to_string(status));
  }
}

// Writes the surface as PNG to a new temporary file beside `path`, then
// renames it over `path`; on failure removes the temporary file.
void save_png(cairo_surface_t* surface, const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const std::string temp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  Sink sink;
  sink.fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (sink.fd < 0) {
    throw FailedPreconditionError("write_learning_curve_png: expected a writable location for '" + path +
                                  "', got: cannot create '" + temp + "': " + errno_text(errno));
  }
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface, write_chunk, &sink);
  const int close_error = ::close(sink.fd) == 0 ? 0 : errno;
  if (status != CAIRO_STATUS_SUCCESS || close_error != 0) {
    ::unlink(temp.c_str());
    const std::string cause = sink.error != 0    ? errno_text(sink.error)
                              : close_error != 0 ? errno_text(close_error)
                                                 : cairo_status_to_string(status);
    throw UnavailableError("write_learning_curve_png: writing '" + temp + "' failed: " + cause);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw FailedPreconditionError("write_learning_curve_png: cannot rename '" + temp + "' to '" + path +
                                  "': " + errno_text(error));
  }
}

}  // namespace

void write_learning_curve_png(const std::string& path, const std::vector<CurvePoint>& points,
                              const PlotOptions& options) {
  if (path.empty()) throw InvalidArgumentError("write_learning_curve_png: expected a file path, got an empty one");
  if (points.empty()) throw InvalidArgumentError("write_learning_curve_png: expected at least one point, got none");
  if (options.width < 320 || options.width > 8192 || options.height < 240 || options.height > 8192) {
    throw InvalidArgumentError("write_learning_curve_png: expected a size within 320..8192 x 240..8192, got " +
                               std::to_string(options.width) + "x" + std::to_string(options.height));
  }
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (points[i].epoch <= points[i - 1].epoch) {
      throw InvalidArgumentError("write_learning_curve_png: expected strictly increasing epochs, got " +
                                 std::to_string(points[i - 1].epoch) + " then " + std::to_string(points[i].epoch) +
                                 " at point " + std::to_string(i));
    }
  }

  std::vector<double> epochs;
  Series loss{"train loss", kBlue, {}};
  Series accuracy{"train accuracy", kOrange, {}};
  Series test_accuracy{"test accuracy", kGreen, {}};
  double loss_lo = std::numeric_limits<double>::infinity(), loss_hi = -loss_lo;
  double acc_lo = loss_lo, acc_hi = -loss_lo;
  for (const CurvePoint& p : points) {
    epochs.push_back(p.epoch);
    loss.values.push_back(p.loss);
    accuracy.values.push_back(p.accuracy);
    test_accuracy.values.push_back(p.test_accuracy);
    if (std::isfinite(p.loss)) {
      loss_lo = std::min(loss_lo, p.loss);
      loss_hi = std::max(loss_hi, p.loss);
    }
    for (double a : {p.accuracy, p.test_accuracy}) {
      if (std::isfinite(a)) {
        acc_lo = std::min(acc_lo, a);
        acc_hi = std::max(acc_hi, a);
      }
    }
  }

  const double w = options.width, h = options.height;
  // Below 960x720 the text shrinks less than the image, to stay readable.
  const double scale = std::max(0.75, std::min(w / 960, h / 720));
  const double left = 88 * scale, right = 24 * scale, top = 52 * scale, bottom = 62 * scale, gap = 24 * scale;
  const double panel_h = (h - top - bottom - gap) / 2;
  const Rect upper{left, top, w - left - right, panel_h};
  const Rect lower{left, top + panel_h + gap, w - left - right, panel_h};
  const int y_ticks = std::max(3, static_cast<int>(panel_h / (45 * scale)));
  const int x_ticks = std::max(2, static_cast<int>(upper.w / (70 * scale)));

  const Axis x = epoch_axis(points.front().epoch, points.back().epoch, x_ticks);
  const Axis loss_axis = value_axis(loss_lo <= loss_hi ? std::min(0.0, loss_lo) : loss_lo, loss_hi, y_ticks);
  Axis acc_axis = value_axis(acc_lo, acc_hi, y_ticks);
  // Accuracies are in [0, 1]: the widened axis stays there too.
  if (acc_lo >= 0 && acc_axis.lo < 0) acc_axis.lo = 0;
  if (acc_hi <= 1 && acc_axis.hi > 1) acc_axis.hi = 1;

  cairo_font_face_t* face = font();
  SurfacePtr surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, options.width, options.height),
                     &cairo_surface_destroy);
  check_cairo(cairo_surface_status(surface.get()), "creating the image");
  ContextPtr context(cairo_create(surface.get()), &cairo_destroy);
  cairo_t* cr = context.get();
  check_cairo(cairo_status(cr), "creating the drawing context");
  cairo_set_font_face(cr, face);

  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_set_font_size(cr, 20 * scale);
  set_color(cr, kText);
  draw_text(cr, options.title, left + upper.w / 2, 14 * scale, 0.5, 0);

  draw_panel(cr, upper, x, loss_axis, epochs, {loss}, "loss", false, true, scale);
  draw_panel(cr, lower, x, acc_axis, epochs, {accuracy, test_accuracy}, "accuracy", true, false, scale);
  cairo_set_font_size(cr, 15 * scale);
  set_color(cr, kText);
  draw_text(cr, "epoch", lower.x + lower.w / 2, h - 8 * scale, 0.5, 1);

  check_cairo(cairo_status(cr), "drawing");
  context.reset();
  cairo_surface_flush(surface.get());
  save_png(surface.get(), path);
}

}  // namespace distribute::train
