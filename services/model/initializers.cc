#include "services/model/initializers.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <Eigen/Dense>

#include "services/model/random.h"

namespace tfjob::model {
namespace {

using json = nlohmann::json;
using Kind = Initializer::Kind;
using Mode = Initializer::Mode;
using Distribution = Initializer::Distribution;

std::string Short(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Keras' compute_fans.
std::pair<double, double> Fans(const Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {static_cast<double>(shape[0]), static_cast<double>(shape[0])};
  double receptive = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) receptive *= static_cast<double>(shape[d]);
  return {receptive * static_cast<double>(shape[shape.size() - 2]), receptive * static_cast<double>(shape.back())};
}

// A normal draw, redrawn while more than two standard deviations out (as
// tf.random.truncated_normal).
float Truncated(Rng& rng, double mean, double stddev) {
  for (;;) {
    const float z = rng.Normal();
    if (std::fabs(z) <= 2.0f) return static_cast<float>(mean + stddev * z);
  }
}

// The class names Keras 3 and Keras 2 (and TF.js) write, with what they mean.
struct Known {
  const char* names[3];
  Initializer (*make)();
};
const Known kKnown[] = {
    {{"Zeros", "zeros", nullptr}, [] { return Initializer::Of(Kind::kZeros); }},
    {{"Ones", "ones", nullptr}, [] { return Initializer::Of(Kind::kOnes); }},
    {{"Constant", "constant", nullptr}, [] { return Initializer::Of(Kind::kConstant); }},
    {{"RandomUniform", "random_uniform", "uniform"}, [] { return Initializer::Uniform(-0.05, 0.05); }},
    {{"RandomNormal", "random_normal", "normal"}, [] { return Initializer::Of(Kind::kRandomNormal); }},
    {{"TruncatedNormal", "truncated_normal", nullptr}, [] { return Initializer::Of(Kind::kTruncatedNormal); }},
    {{"VarianceScaling", "variance_scaling", nullptr}, [] { return Initializer::Of(Kind::kVarianceScaling); }},
    {{"Orthogonal", "orthogonal", nullptr}, [] { return Initializer::Of(Kind::kOrthogonal); }},
    {{"Identity", "identity", nullptr}, [] { return Initializer::Of(Kind::kIdentity); }},
    {{"GlorotUniform", "glorot_uniform", nullptr},
     [] { return Initializer::VarianceScaling(1, Mode::kFanAvg, Distribution::kUniform); }},
    {{"GlorotNormal", "glorot_normal", nullptr},
     [] { return Initializer::VarianceScaling(1, Mode::kFanAvg, Distribution::kTruncatedNormal); }},
    {{"HeUniform", "he_uniform", nullptr},
     [] { return Initializer::VarianceScaling(2, Mode::kFanIn, Distribution::kUniform); }},
    {{"HeNormal", "he_normal", nullptr},
     [] { return Initializer::VarianceScaling(2, Mode::kFanIn, Distribution::kTruncatedNormal); }},
    {{"LecunUniform", "lecun_uniform", nullptr},
     [] { return Initializer::VarianceScaling(1, Mode::kFanIn, Distribution::kUniform); }},
    {{"LecunNormal", "lecun_normal", nullptr},
     [] { return Initializer::VarianceScaling(1, Mode::kFanIn, Distribution::kTruncatedNormal); }},
};

std::string KnownNames() {
  std::string s;
  for (const Known& k : kKnown) s += (s.empty() ? "" : ", ") + std::string(k.names[0]);
  return s;
}

}  // namespace

bool Initializer::operator==(const Initializer& o) const {
  return kind == o.kind && minval == o.minval && maxval == o.maxval && mean == o.mean && stddev == o.stddev &&
         value == o.value && gain == o.gain && scale == o.scale && mode == o.mode && distribution == o.distribution;
}

std::string Initializer::ToString() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::kZeros: return "Zeros";
    case Kind::kOnes: return "Ones";
    case Kind::kValue: return "(a given value)";
    case Kind::kConstant: os << "Constant(value=" << value << ")"; break;
    case Kind::kRandomUniform: os << "RandomUniform(minval=" << minval << ", maxval=" << maxval << ")"; break;
    case Kind::kRandomNormal: os << "RandomNormal(mean=" << mean << ", stddev=" << stddev << ")"; break;
    case Kind::kTruncatedNormal: os << "TruncatedNormal(mean=" << mean << ", stddev=" << stddev << ")"; break;
    case Kind::kOrthogonal: os << "Orthogonal(gain=" << gain << ")"; break;
    case Kind::kIdentity: os << "Identity(gain=" << gain << ")"; break;
    case Kind::kVarianceScaling:
      os << "VarianceScaling(scale=" << scale << ", mode="
         << (mode == Mode::kFanIn    ? "fan_in"
             : mode == Mode::kFanOut ? "fan_out"
                                     : "fan_avg")
         << ", distribution="
         << (distribution == Distribution::kUniform           ? "uniform"
             : distribution == Distribution::kTruncatedNormal ? "truncated_normal"
                                                              : "untruncated_normal")
         << ")";
      break;
  }
  return os.str();
}

StatusOr<Initializer> ParseInitializer(const json& v) {
  std::string name;
  json config = json::object();
  if (v.is_string()) {
    name = v.get<std::string>();
  } else if (v.is_object() && v.contains("class_name") && v["class_name"].is_string()) {
    name = v["class_name"].get<std::string>();
    if (v.contains("config") && !v["config"].is_null()) {
      if (!v["config"].is_object()) return InvalidArgument("initializer " + Short(v) + ": config is not an object");
      config = v["config"];
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() != "class_name" && it.key() != "config" && it.key() != "module" && it.key() != "registered_name") {
        return InvalidArgument("initializer " + Short(v) + ": key " + it.key() + " is not supported");
      }
    }
  } else {
    return InvalidArgument("initializer " + Short(v) + " is not a name or {\"class_name\": ..., \"config\": {...}}");
  }
  const Known* known = nullptr;
  for (const Known& k : kKnown) {
    for (const char* n : k.names) {
      if (n && name == n) known = &k;
    }
  }
  if (!known) return InvalidArgument("initializer " + Short(v) + " is not supported (Keras' " + KnownNames() + ")");
  Initializer init = known->make();
  std::set<std::string> taken{"seed"};
  auto number = [&](const char* key, double& out) -> Status {
    taken.insert(key);
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return Status::Ok();
    if (!it->is_number())
      return InvalidArgument("initializer " + name + ": " + key + "=" + Short(*it) + " is not a number");
    out = it->get<double>();
    return Status::Ok();
  };
  auto text = [&](const char* key, std::string& out) -> Status {
    taken.insert(key);
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return Status::Ok();
    if (!it->is_string())
      return InvalidArgument("initializer " + name + ": " + key + "=" + Short(*it) + " is not a string");
    out = it->get<std::string>();
    return Status::Ok();
  };
  auto seed = config.find("seed");
  if (seed != config.end() && !seed->is_null() && !seed->is_number_integer()) {
    return InvalidArgument("initializer " + name + ": seed=" + Short(*seed) + " is not an integer");
  }
  switch (init.kind) {
    case Kind::kConstant: RETURN_IF_ERROR(number("value", init.value)); break;
    case Kind::kRandomUniform:
      RETURN_IF_ERROR(number("minval", init.minval));
      RETURN_IF_ERROR(number("maxval", init.maxval));
      if (!(init.minval <= init.maxval)) return InvalidArgument("initializer " + name + ": minval > maxval");
      break;
    case Kind::kRandomNormal:
    case Kind::kTruncatedNormal:
      RETURN_IF_ERROR(number("mean", init.mean));
      RETURN_IF_ERROR(number("stddev", init.stddev));
      if (!(init.stddev >= 0)) return InvalidArgument("initializer " + name + ": stddev must be >= 0");
      break;
    case Kind::kOrthogonal:
    case Kind::kIdentity: RETURN_IF_ERROR(number("gain", init.gain)); break;
    case Kind::kVarianceScaling: {
      if (name == "VarianceScaling" || name == "variance_scaling") {
        RETURN_IF_ERROR(number("scale", init.scale));
        std::string mode = "fan_in", dist = "truncated_normal";
        RETURN_IF_ERROR(text("mode", mode));
        RETURN_IF_ERROR(text("distribution", dist));
        if (mode == "fan_in")
          init.mode = Mode::kFanIn;
        else if (mode == "fan_out")
          init.mode = Mode::kFanOut;
        else if (mode == "fan_avg")
          init.mode = Mode::kFanAvg;
        else
          return InvalidArgument("initializer " + name + ": mode \"" + mode + "\" is not fan_in, fan_out or fan_avg");
        // "normal" is tf.keras 2's and TF.js' name for the truncated normal.
        if (dist == "truncated_normal" || dist == "normal")
          init.distribution = Distribution::kTruncatedNormal;
        else if (dist == "untruncated_normal")
          init.distribution = Distribution::kUntruncatedNormal;
        else if (dist == "uniform")
          init.distribution = Distribution::kUniform;
        else
          return InvalidArgument("initializer " + name + ": distribution \"" + dist +
                                 "\" is not truncated_normal, untruncated_normal, normal or uniform");
        if (!(init.scale > 0)) return InvalidArgument("initializer " + name + ": scale must be > 0");
      }
      break;
    }
    case Kind::kZeros:
    case Kind::kOnes:
    case Kind::kValue: break;
  }
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!taken.count(it.key()))
      return InvalidArgument("initializer " + name + ": argument " + it.key() + " is not supported");
  }
  return init;
}

Status FillInitializer(const Initializer& init, Tensor& t, Rng& rng) {
  float* p = t.data<float>();
  const int64_t n = t.size();
  switch (init.kind) {
    case Kind::kZeros: std::fill_n(p, n, 0.f); return Status::Ok();
    case Kind::kOnes: std::fill_n(p, n, 1.f); return Status::Ok();
    case Kind::kValue: return Status::Ok();  // the caller copies the value
    case Kind::kConstant: std::fill_n(p, n, static_cast<float>(init.value)); return Status::Ok();
    case Kind::kRandomUniform:
      for (int64_t i = 0; i < n; ++i)
        p[i] = rng.Uniform(static_cast<float>(init.minval), static_cast<float>(init.maxval));
      return Status::Ok();
    case Kind::kRandomNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(init.mean + init.stddev * rng.Normal());
      return Status::Ok();
    case Kind::kTruncatedNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = Truncated(rng, init.mean, init.stddev);
      return Status::Ok();
    case Kind::kVarianceScaling: {
      auto [fan_in, fan_out] = Fans(t.shape());
      const double fan = init.mode == Mode::kFanIn    ? fan_in
                         : init.mode == Mode::kFanOut ? fan_out
                                                      : (fan_in + fan_out) / 2;
      const double scale = init.scale / std::max(1.0, fan);
      switch (init.distribution) {
        case Distribution::kUniform: {
          const float limit = static_cast<float>(std::sqrt(3.0 * scale));
          for (int64_t i = 0; i < n; ++i) p[i] = rng.Uniform(-limit, limit);
          break;
        }
        case Distribution::kTruncatedNormal: {
          // The standard deviation of a unit normal truncated at +-2.
          const double stddev = std::sqrt(scale) / 0.87962566103423978;
          for (int64_t i = 0; i < n; ++i) p[i] = Truncated(rng, 0, stddev);
          break;
        }
        case Distribution::kUntruncatedNormal: {
          const double stddev = std::sqrt(scale);
          for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(stddev * rng.Normal());
          break;
        }
      }
      return Status::Ok();
    }
    case Kind::kIdentity: {
      if (t.rank() != 2) {
        return InvalidArgument("Identity initializes 2-D weights only, got shape " + ShapeString(t.shape()));
      }
      std::fill_n(p, n, 0.f);
      for (int64_t i = 0; i < std::min(t.dim(0), t.dim(1)); ++i) p[i * t.dim(1) + i] = static_cast<float>(init.gain);
      return Status::Ok();
    }
    case Kind::kOrthogonal: {
      if (t.rank() < 2) {
        return InvalidArgument("Orthogonal initializes weights of rank >= 2, got shape " + ShapeString(t.shape()));
      }
      // Keras: a normal matrix of (rows, cols) flattened as (prod(shape[:-1]), shape[-1]),
      // transposed when it has more columns; Q of its QR with R's diagonal signs.
      const int64_t cols = t.shape().back(), rows = n / std::max<int64_t>(cols, 1);
      const int64_t r = std::max(rows, cols), c = std::min(rows, cols);
      Eigen::MatrixXd a(r, c);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) a(i, j) = rng.Normal();
      Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
      Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(r, c);
      const Eigen::MatrixXd rr = qr.matrixQR();
      for (int64_t j = 0; j < c; ++j) {
        if (rr(j, j) < 0) q.col(j) *= -1;
      }
      if (rows < cols) q.transposeInPlace();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = static_cast<float>(init.gain * q(i, j));
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace tfjob::model
