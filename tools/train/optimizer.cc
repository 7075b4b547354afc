#include "optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include "mlp_kernels.h"
#include "model.h"

namespace distribute::train {
namespace {

std::vector<Variable> make_slots(const std::vector<Variable>& params, const std::string& slot) {
  std::vector<Variable> slots;
  for (const Variable& p : params) {
    slots.emplace_back(Tensor::zeros(p.dtype(), p.shape()), named(p.name() + "/" + slot));
  }
  return slots;
}

// Keras's SGD with momentum: v = momentum * v - lr * g; w += v.
class MomentumSgd final : public Optimizer {
 public:
  MomentumSgd(std::vector<Variable> params, double lr, double momentum)
      : params_(std::move(params)),
        velocity_(make_slots(params_, "momentum")),
        lr_(static_cast<float>(lr)),
        momentum_(static_cast<float>(momentum)) {}

  void apply(const std::vector<Tensor>& grads) override {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const Tensor v = velocity_[i].value();
      const Tensor w = params_[i].value();
      const std::int64_t n = w.num_elements();
      std::shared_ptr<float[]> new_w = uninitialized_floats(n), new_v = uninitialized_floats(n);
      kernels::active().sgd(n, w.data<float>().data(), v.data<float>().data(), grads[i].data<float>().data(), lr_,
                            momentum_, new_w.get(), new_v.get());
      params_[i].assign(own_floats(std::move(new_w), w.shape()));
      velocity_[i].assign(own_floats(std::move(new_v), v.shape()));
    }
  }
  void track(Checkpoint& checkpoint) const override {
    for (const Variable& v : velocity_) checkpoint.track("optimizer/" + v.name(), v);
  }
  std::vector<Variable> slots() const override { return velocity_; }

 private:
  std::vector<Variable> params_, velocity_;
  float lr_, momentum_;
};

// Keras's Adam (epsilon outside the square root, bias correction in the rate).
class Adam final : public Optimizer {
 public:
  Adam(std::vector<Variable> params, double lr)
      : params_(std::move(params)),
        m_(make_slots(params_, "m")),
        v_(make_slots(params_, "v")),
        iterations_(Tensor(std::int64_t{0}), named("optimizer/iterations")),
        lr_(lr) {}

  void apply(const std::vector<Tensor>& grads) override {
    const std::int64_t t = iterations_.value().item<std::int64_t>() + 1;
    iterations_.assign(Tensor(t));
    const double td = static_cast<double>(t);
    const auto lr_t = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(kBeta2, td)) / (1.0 - std::pow(kBeta1, td)));
    const auto b1 = static_cast<float>(kBeta1), b2 = static_cast<float>(kBeta2);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const Tensor m = m_[i].value(), v = v_[i].value(), w = params_[i].value();
      const std::int64_t n = w.num_elements();
      std::shared_ptr<float[]> new_w = uninitialized_floats(n), new_m = uninitialized_floats(n),
                               new_v = uninitialized_floats(n);
      kernels::active().adam(n, w.data<float>().data(), m.data<float>().data(), v.data<float>().data(),
                             grads[i].data<float>().data(), b1, b2, lr_t, kEpsilon, new_w.get(), new_m.get(),
                             new_v.get());
      params_[i].assign(own_floats(std::move(new_w), w.shape()));
      m_[i].assign(own_floats(std::move(new_m), m.shape()));
      v_[i].assign(own_floats(std::move(new_v), v.shape()));
    }
  }
  void track(Checkpoint& checkpoint) const override {
    checkpoint.track("optimizer/iterations", iterations_);
    for (const Variable& m : m_) checkpoint.track("optimizer/" + m.name(), m);
    for (const Variable& v : v_) checkpoint.track("optimizer/" + v.name(), v);
  }
  std::vector<Variable> slots() const override {
    std::vector<Variable> all{iterations_};
    all.insert(all.end(), m_.begin(), m_.end());
    all.insert(all.end(), v_.begin(), v_.end());
    return all;
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999;
  static constexpr float kEpsilon = 1e-7f;
  std::vector<Variable> params_, m_, v_;
  Variable iterations_;
  double lr_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& config, const std::vector<Variable>& params) {
  if (config.optimizer == OptimizerKind::kAdam) return std::make_unique<Adam>(params, config.effective_learning_rate());
  return std::make_unique<MomentumSgd>(params, config.effective_learning_rate(), config.momentum);
}

}  // namespace distribute::train
