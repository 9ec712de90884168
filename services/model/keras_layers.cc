// Keras configs of the layers added for Functional models: every argument
// is read into the LayerSpec, checked against what the runtime implements,
// or reported (Config::Finish reports what no parser took). Keras 2 (and
// TF.js) and Keras 3 spell a few arguments differently; both are read:
// LeakyReLU's alpha / negative_slope, pool sizes as n or [n].
#include <string_view>
#include <utility>

#include "services/model/keras_config.h"
#include "services/model/keras_model.h"
#include "services/model/layers.h"
#include "services/model/preprocessing.h"
#include "services/model/text.h"

namespace tfjob::model::keras {
namespace {

// n or [n], a positive integer.
Status OneInt(Config& c, const std::string& key, int64_t& out) {
  const json* v = c.Take(key);
  if (!v) return Status::Ok();
  const json& x = v->is_array() && v->size() == 1 ? (*v)[0] : *v;
  if (!x.is_number_integer() || x.get<int64_t>() <= 0) {
    return c.Error("argument " + key + "=" + Dump(*v) + " is not a positive integer or a list of one");
  }
  out = x.get<int64_t>();
  return Status::Ok();
}

Status NonNegative(Config& c, const std::string& key, double& out) {
  RETURN_IF_ERROR(c.Number(key, out));
  if (!(out >= 0)) return c.Error("argument " + key + "=" + std::to_string(out) + " must be >= 0");
  return Status::Ok();
}

// padding: valid, same, and causal where allowed; data_format channels_last.
Status ConvPadding(Config& c, LayerSpec& s, bool causal_ok) {
  std::string p = "valid";
  RETURN_IF_ERROR(c.String("padding", p));
  s.padding = p == "same" ? Padding::kSame : Padding::kValid;
  s.causal = p == "causal" && causal_ok;
  if (p != "valid" && p != "same" && !s.causal) {
    return c.Error("argument padding=\"" + p + "\" is not supported (valid, same" + (causal_ok ? ", causal)" : ")"));
  }
  return c.Only("data_format", {"channels_last"}, "only channels_last");
}

// A non-negative integer, [a, b], or (2D) [[top, bottom], [left, right]];
// [a, b] means (a, a), (b, b) in 2D and (a, b) in 1D.
Status Margins(Config& c, const std::string& key, bool two_d, std::array<int64_t, 4>& m) {
  const json* v = c.Take(key);
  if (!v) return Status::Ok();
  auto n = [](const json& x) { return x.is_number_integer() && x.get<int64_t>() >= 0; };
  auto pair = [&](const json& x) { return x.is_array() && x.size() == 2 && n(x[0]) && n(x[1]); };
  if (n(*v)) {
    const auto k = v->get<int64_t>();
    m = two_d ? std::array<int64_t, 4>{k, k, k, k} : std::array<int64_t, 4>{k, k, 0, 0};
  } else if (pair(*v)) {
    const auto a = (*v)[0].get<int64_t>(), b = (*v)[1].get<int64_t>();
    m = two_d ? std::array<int64_t, 4>{a, a, b, b} : std::array<int64_t, 4>{a, b, 0, 0};
  } else if (two_d && v->is_array() && v->size() == 2 && pair((*v)[0]) && pair((*v)[1])) {
    m = {(*v)[0][0].get<int64_t>(), (*v)[0][1].get<int64_t>(), (*v)[1][0].get<int64_t>(), (*v)[1][1].get<int64_t>()};
  } else {
    return c.Error("argument " + key + "=" + Dump(*v) + " is not a non-negative integer, a pair of them" +
                   (two_d ? " or a pair of pairs" : ""));
  }
  return Status::Ok();
}

// An integer or a list of integers.
Status Ints(Config& c, const std::string& key, std::vector<int64_t>& out, bool required = false) {
  const json* v = c.Take(key);
  if (!v) return required ? c.Error("argument " + key + " is missing") : Status::Ok();
  out.clear();
  if (v->is_number_integer()) {
    out.push_back(v->get<int64_t>());
    return Status::Ok();
  }
  if (!v->is_array()) return c.Error("argument " + key + "=" + Dump(*v) + " is not an integer or a list of them");
  for (const json& x : *v) {
    if (!x.is_number_integer()) return c.Error("argument " + key + "=" + Dump(*v) + " is not a list of integers");
    out.push_back(x.get<int64_t>());
  }
  return Status::Ok();
}

Status ReLU(Config& c, LayerSpec& s) {
  const json* max = c.Take("max_value");
  if (max) {
    if (!max->is_number() || max->get<double>() < 0) {
      return c.Error("argument max_value=" + Dump(*max) + " is not a number >= 0");
    }
    s.has_max_value = true;
    s.max_value = max->get<double>();
  }
  RETURN_IF_ERROR(NonNegative(c, "negative_slope", s.negative_slope));
  return NonNegative(c, "threshold", s.threshold);
}

Status LeakyReLU(Config& c, LayerSpec& s) {
  s.negative_slope = 0.3;
  RETURN_IF_ERROR(NonNegative(c, "alpha", s.negative_slope));  // Keras 2, TF.js
  return NonNegative(c, "negative_slope", s.negative_slope);   // Keras 3
}

Status PReLU(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(InitializerArgument(c, "alpha_initializer", s.alpha_initializer));
  RETURN_IF_ERROR(RegularizerArgument(c, "alpha_regularizer", s.alpha_regularizer));
  RETURN_IF_ERROR(ConstraintArgument(c, "alpha_constraint", s.alpha_constraint));
  return Ints(c, "shared_axes", s.shared_axes);
}

Status ELU(Config& c, LayerSpec& s) {
  s.alpha = 1;
  return c.Number("alpha", s.alpha);
}

Status Softmax(Config& c, LayerSpec& s) {
  std::vector<int64_t> axes{-1};
  RETURN_IF_ERROR(Ints(c, "axis", axes));
  if (axes.size() != 1) return c.Error("argument axis is not supported (one axis)");
  s.axis = axes[0];
  return Status::Ok();
}

Status ThresholdedReLU(Config& c, LayerSpec& s) {
  s.threshold = 1;
  return NonNegative(c, "theta", s.threshold);
}

Status Rescaling(Config& c, LayerSpec& s) {
  if (!c.Take("scale")) return c.Error("argument scale is missing");
  RETURN_IF_ERROR(c.Number("scale", s.rescale));  // read again: Take only marked it
  return c.Number("offset", s.offset);
}

Status LayerNormalization(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(Ints(c, "axis", s.norm_axes));
  RETURN_IF_ERROR(c.Number("epsilon", s.epsilon));
  RETURN_IF_ERROR(c.Bool("center", s.center));
  RETURN_IF_ERROR(c.Bool("scale", s.scale));
  RETURN_IF_ERROR(c.Only("rms_scaling", {false}, "only false"));
  RETURN_IF_ERROR(InitializerArgument(c, "gamma_initializer", s.gamma_initializer));
  RETURN_IF_ERROR(InitializerArgument(c, "beta_initializer", s.beta_initializer));
  RETURN_IF_ERROR(RegularizerArgument(c, "gamma_regularizer", s.gamma_regularizer));
  RETURN_IF_ERROR(RegularizerArgument(c, "beta_regularizer", s.beta_regularizer));
  RETURN_IF_ERROR(ConstraintArgument(c, "gamma_constraint", s.gamma_constraint));
  return ConstraintArgument(c, "beta_constraint", s.beta_constraint);
}

Status Permute(Config& c, LayerSpec& s) { return Ints(c, "dims", s.permutation, true); }
Status RepeatVector(Config& c, LayerSpec& s) { return c.Int("n", s.repeats, true); }

Status DropoutLike(Config& c, LayerSpec& s) {
  const json* rate = c.Take("rate");
  if (!rate || !rate->is_number()) return c.Error("argument rate is missing");
  s.rate = rate->get<double>();
  if (!(s.rate >= 0 && s.rate < 1)) return c.Error("argument rate=" + Dump(*rate) + " must be in [0, 1)");
  RETURN_IF_ERROR(c.Int("seed", s.seed));
  RETURN_IF_ERROR(c.Null("noise_shape"));
  return c.Only("data_format", {"channels_last"}, "only channels_last");
}

Status GaussianNoise(Config& c, LayerSpec& s) {
  if (!c.Take("stddev")) return c.Error("argument stddev is missing");
  RETURN_IF_ERROR(NonNegative(c, "stddev", s.stddev));
  return c.Int("seed", s.seed);
}

Status GlobalPooling(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(c.Only("data_format", {"channels_last"}, "only channels_last"));
  return c.Bool("keepdims", s.keepdims);
}

Status Pooling1D(Config& c, LayerSpec& s) {
  s.kernel_size = {2, 1};
  RETURN_IF_ERROR(OneInt(c, "pool_size", s.kernel_size[0]));
  s.strides = {s.kernel_size[0], 1};
  RETURN_IF_ERROR(OneInt(c, "strides", s.strides[0]));
  return ConvPadding(c, s, false);
}

// What Conv1D, Conv2D and Conv2DTranspose share: filters, kernel_size,
// strides, dilation_rate, activation, use_bias and the weight arguments.
Status ConvCommon(Config& c, LayerSpec& s, bool one_d) {
  RETURN_IF_ERROR(c.Int("filters", s.filters, true));
  if (one_d) {
    if (!c.Take("kernel_size")) return c.Error("argument kernel_size is missing");
    RETURN_IF_ERROR(OneInt(c, "kernel_size", s.kernel_size[0]));
    RETURN_IF_ERROR(OneInt(c, "strides", s.strides[0]));
    RETURN_IF_ERROR(OneInt(c, "dilation_rate", s.dilation_rate[0]));
    s.kernel_size[1] = s.strides[1] = s.dilation_rate[1] = 1;
  } else {
    RETURN_IF_ERROR(c.Pair("kernel_size", s.kernel_size, true));
    RETURN_IF_ERROR(c.Pair("strides", s.strides));
    RETURN_IF_ERROR(c.Pair("dilation_rate", s.dilation_rate));
  }
  RETURN_IF_ERROR(ActivationArgument(c, s));
  RETURN_IF_ERROR(c.Bool("use_bias", s.use_bias));
  return WeightArguments(c, s, true);
}

Status Conv1D(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(ConvCommon(c, s, true));
  RETURN_IF_ERROR(c.Int("groups", s.groups));
  return ConvPadding(c, s, true);
}

Status Conv2DTranspose(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(ConvCommon(c, s, false));
  RETURN_IF_ERROR(c.Null("output_padding"));
  RETURN_IF_ERROR(c.Only("groups", {1}, "only 1"));
  return ConvPadding(c, s, false);
}

// DepthwiseConv2D and SeparableConv2D: the depthwise step's arguments.
Status Depthwise(Config& c, LayerSpec& s, bool separable) {
  if (separable) RETURN_IF_ERROR(c.Int("filters", s.filters, true));
  RETURN_IF_ERROR(c.Pair("kernel_size", s.kernel_size, true));
  RETURN_IF_ERROR(c.Pair("strides", s.strides));
  RETURN_IF_ERROR(c.Pair("dilation_rate", s.dilation_rate));
  RETURN_IF_ERROR(c.Int("depth_multiplier", s.depth_multiplier));
  RETURN_IF_ERROR(ConvPadding(c, s, false));
  RETURN_IF_ERROR(ActivationArgument(c, s));
  RETURN_IF_ERROR(c.Bool("use_bias", s.use_bias));
  RETURN_IF_ERROR(InitializerArgument(c, "depthwise_initializer", s.depthwise_initializer));
  RETURN_IF_ERROR(RegularizerArgument(c, "depthwise_regularizer", s.depthwise_regularizer));
  RETURN_IF_ERROR(ConstraintArgument(c, "depthwise_constraint", s.depthwise_constraint));
  if (separable) {
    RETURN_IF_ERROR(InitializerArgument(c, "pointwise_initializer", s.pointwise_initializer));
    RETURN_IF_ERROR(RegularizerArgument(c, "pointwise_regularizer", s.pointwise_regularizer));
    RETURN_IF_ERROR(ConstraintArgument(c, "pointwise_constraint", s.pointwise_constraint));
    RETURN_IF_ERROR(c.Only("groups", {1}, "only 1"));  // tf.keras 2 writes Conv's groups
  }
  RETURN_IF_ERROR(InitializerArgument(c, "bias_initializer", s.bias_initializer));
  RETURN_IF_ERROR(RegularizerArgument(c, "bias_regularizer", s.bias_regularizer));
  RETURN_IF_ERROR(ConstraintArgument(c, "bias_constraint", s.bias_constraint));
  return RegularizerArgument(c, "activity_regularizer", s.activity_regularizer);
}

Status ZeroPadding1D(Config& c, LayerSpec& s) {
  s.margins = {1, 1, 0, 0};
  RETURN_IF_ERROR(Margins(c, "padding", false, s.margins));
  return c.Only("data_format", {"channels_last"}, "only channels_last");  // newer Keras 3 writes it
}
Status ZeroPadding2D(Config& c, LayerSpec& s) {
  s.margins = {1, 1, 1, 1};
  RETURN_IF_ERROR(Margins(c, "padding", true, s.margins));
  return c.Only("data_format", {"channels_last"}, "only channels_last");
}
Status Cropping1D(Config& c, LayerSpec& s) {
  s.margins = {1, 1, 0, 0};
  return Margins(c, "cropping", false, s.margins);
}
Status Cropping2D(Config& c, LayerSpec& s) {
  s.margins = {0, 0, 0, 0};
  RETURN_IF_ERROR(Margins(c, "cropping", true, s.margins));
  return c.Only("data_format", {"channels_last"}, "only channels_last");
}
Status UpSampling1D(Config& c, LayerSpec& s) {
  s.kernel_size = {2, 1};
  return OneInt(c, "size", s.kernel_size[0]);
}
Status UpSampling2D(Config& c, LayerSpec& s) {
  s.kernel_size = {2, 2};
  RETURN_IF_ERROR(c.Pair("size", s.kernel_size));
  RETURN_IF_ERROR(c.Only("interpolation", {"nearest"}, "only nearest"));
  return c.Only("data_format", {"channels_last"}, "only channels_last");
}

Status CategoryEncoding(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(c.Int("num_tokens", s.num_tokens, true));
  std::string mode = "multi_hot";
  RETURN_IF_ERROR(c.String("output_mode", mode));
  if (mode == "one_hot") {
    s.encoding = EncodingMode::kOneHot;
  } else if (mode == "multi_hot") {
    s.encoding = EncodingMode::kMultiHot;
  } else if (mode == "count") {
    s.encoding = EncodingMode::kCount;
  } else {
    return c.Error("argument output_mode=\"" + mode + "\" is not supported (one_hot, multi_hot, count)");
  }
  return c.Only("sparse", {false}, "only false");
}

Status Hashing(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(c.Int("num_bins", s.num_bins, true));
  const json* mask = c.Take("mask_value");
  if (mask) {
    if (!mask->is_number_integer()) return c.Error("argument mask_value=" + Dump(*mask) + " is not an integer");
    s.has_mask_value = true;
    s.mask_value = mask->get<int64_t>();
  }
  RETURN_IF_ERROR(c.Null("salt"));
  RETURN_IF_ERROR(c.Only("output_mode", {"int"}, "only int"));
  return c.Only("sparse", {false}, "only false");
}

// SimpleRNN, LSTM, GRU (Keras 2, TF.js and Keras 3 spellings). Hints that
// change how Keras computes but not what (implementation, unroll,
// use_cudnn) are read and have no effect; state the runtime does not keep
// between batches (stateful) and extra outputs (return_state) are refused.
Status Recurrent(Config& c, LayerSpec& s) {
  RETURN_IF_ERROR(c.Int("units", s.units, true));
  if (s.units <= 0) return c.Error("argument units=" + std::to_string(s.units) + " must be positive");
  s.activation = Activation::kTanh;
  RETURN_IF_ERROR(ActivationArgument(c, s));
  if (s.type != LayerType::kSimpleRNN) {
    if (const json* a = c.Take("recurrent_activation")) {
      if (!a->is_string()) return c.Error("argument recurrent_activation=" + Dump(*a) + " is not a built-in name");
      auto act = ParseActivation(a->get<std::string>());
      if (!act.ok()) return c.Error("argument recurrent_activation: " + act.status().message());
      s.recurrent_activation = *act;
    }
  }
  RETURN_IF_ERROR(c.Bool("use_bias", s.use_bias));
  RETURN_IF_ERROR(WeightArguments(c, s, s.use_bias));
  if (!s.use_bias) {
    for (const char* k : {"bias_initializer", "bias_regularizer", "bias_constraint"}) c.Take(k);
  }
  RETURN_IF_ERROR(InitializerArgument(c, "recurrent_initializer", s.recurrent_initializer));
  RETURN_IF_ERROR(RegularizerArgument(c, "recurrent_regularizer", s.recurrent_regularizer));
  RETURN_IF_ERROR(ConstraintArgument(c, "recurrent_constraint", s.recurrent_constraint));
  if (s.type == LayerType::kLSTM) {
    // TF.js writes null for its default, false; Keras' default is true.
    if (const json* u = c.Take("unit_forget_bias")) {
      if (!u->is_boolean()) return c.Error("argument unit_forget_bias=" + Dump(*u) + " is not true or false");
      s.unit_forget_bias = u->get<bool>();
    } else if (c.Present("unit_forget_bias")) {
      s.unit_forget_bias = false;
    }
  }
  using Kind = Initializer::Kind;
  const Kind bias_kind = s.bias_initializer.kind;
  if (s.type == LayerType::kLSTM && s.unit_forget_bias && s.use_bias && bias_kind != Kind::kZeros &&
      bias_kind != Kind::kOnes && bias_kind != Kind::kConstant) {
    return c.Error("argument unit_forget_bias=true with bias_initializer " + s.bias_initializer.ToString() +
                   " is not supported (Zeros, Ones or Constant)");
  }
  if (s.type == LayerType::kGRU) RETURN_IF_ERROR(c.Bool("reset_after", s.reset_after));
  for (auto [key, out] :
       {std::pair<const char*, double*>{"dropout", &s.rate}, {"recurrent_dropout", &s.recurrent_dropout}}) {
    RETURN_IF_ERROR(c.Number(key, *out));
    if (!(*out >= 0 && *out < 1))
      return c.Error("argument " + std::string(key) + "=" + std::to_string(*out) + " must be in [0, 1)");
  }
  RETURN_IF_ERROR(c.Int("seed", s.seed));
  RETURN_IF_ERROR(c.Bool("return_sequences", s.return_sequences));
  RETURN_IF_ERROR(c.Bool("go_backwards", s.go_backwards));
  RETURN_IF_ERROR(c.Bool("return_state", s.return_state));
  RETURN_IF_ERROR(c.Only("stateful", {false}, "only false: state is not kept between batches"));
  RETURN_IF_ERROR(c.Only("time_major", {false}, "only false: [batch, time, features]"));
  RETURN_IF_ERROR(c.Only("zero_output_for_mask", {false}, "only false"));
  for (const char* hint : {"implementation", "unroll", "use_cudnn"}) c.Take(hint);
  return Status::Ok();
}

// The layer a wrapper holds under `key` ({"class_name", "config"}, Keras 3's
// "module" and "registered_name" beside them), parsed as any layer is.
StatusOr<LayerSpec> Wrapped(Config& c, const std::string& key) {
  const json* v = c.Take(key);
  if (!v) return c.Error("argument " + key + " is missing");
  if (!v->is_object() || !v->contains("class_name") || !(*v)["class_name"].is_string() ||
      (v->contains("config") && !(*v)["config"].is_object())) {
    return c.Error("argument " + key + "=" + Dump(*v) + " is not a layer ({\"class_name\": ..., \"config\": {...}})");
  }
  const std::string cls = (*v)["class_name"].get<std::string>();
  static const json kEmpty = json::object();
  const json& cfg = v->contains("config") ? (*v)["config"] : kEmpty;
  Config inner(cfg, c.where() + ": " + key + " (" + cls + ")");
  LayerSpec s;
  RETURN_IF_ERROR(ParseLayerConfig(cls, inner, s));
  if (s.name.empty()) s.name = KerasSnakeCase(cls);
  return s;
}

bool IsRecurrent(LayerType t) { return t == LayerType::kSimpleRNN || t == LayerType::kLSTM || t == LayerType::kGRU; }

// Bidirectional(layer, merge_mode, backward_layer): the backward layer is
// the given one, or a copy of `layer` with go_backwards flipped.
Status Bidirectional(Config& c, LayerSpec& s) {
  ASSIGN_OR_RETURN(LayerSpec fwd, Wrapped(c, "layer"));
  if (!IsRecurrent(fwd.type)) {
    return c.Error("argument layer: Bidirectional wraps SimpleRNN, LSTM or GRU, got " +
                   std::string(LayerTypeName(fwd.type)));
  }
  std::string mode = "concat";
  if (fwd.return_state) {
    return c.Error("argument layer: return_state=true in a Bidirectional is not supported (its four states)");
  }
  // null: the two directions' outputs, computed concatenated and taken
  // apart by the model (spec.h: bidi_split).
  if (c.Present("merge_mode") && !c.Take("merge_mode")) s.bidi_split = true;
  RETURN_IF_ERROR(c.String("merge_mode", mode));
  static const std::pair<const char*, BidiMerge> kModes[] = {
      {"concat", BidiMerge::kConcat}, {"sum", BidiMerge::kSum}, {"mul", BidiMerge::kMul}, {"ave", BidiMerge::kAve}};
  bool known = false;
  for (const auto& [name, m] : kModes) {
    if (mode == name) s.bidi_merge = m, known = true;
  }
  if (!known) return c.Error("argument merge_mode=\"" + mode + "\" is not supported (concat, sum, mul, ave)");
  LayerSpec bwd = fwd;
  bwd.go_backwards = !fwd.go_backwards;
  if (c.Present("backward_layer")) {
    ASSIGN_OR_RETURN(bwd, Wrapped(c, "backward_layer"));
    if (bwd.type != fwd.type || bwd.units != fwd.units || bwd.return_sequences != fwd.return_sequences) {
      return c.Error("argument backward_layer: must be a " + std::string(LayerTypeName(fwd.type)) + " of " +
                     std::to_string(fwd.units) + " units with the forward layer's return_sequences");
    }
  }
  // Keras 3 writes the forward copy, already named forward_<name>.
  for (LayerSpec* half : {&fwd, &bwd}) {
    for (const char* prefix : {"forward_", "backward_"}) {
      if (half->name.rfind(prefix, 0) == 0) half->name.erase(0, std::string(prefix).size());
    }
  }
  s.wrapped = {fwd, bwd};
  s.return_sequences = fwd.return_sequences;  // whether a mask passes (layers.h)
  return Status::Ok();
}

Status TimeDistributed(Config& c, LayerSpec& s) {
  ASSIGN_OR_RETURN(LayerSpec inner, Wrapped(c, "layer"));
  if (inner.return_state || inner.bidi_split) return c.Error("argument layer: a layer of several outputs");
  s.wrapped = {inner};
  return Status::Ok();
}

// One of `names` (an enum's Keras spellings, null for the last), or an error.
template <typename E>
Status Choice(Config& c, const std::string& key, std::initializer_list<std::pair<const char*, E>> names, E& out,
              bool null_allowed) {
  const bool present = c.Present(key);
  const json* v = c.Take(key);
  if (!v) {
    if (present && null_allowed) out = (names.end() - 1)->second;
    if (present && !null_allowed) return c.Error("argument " + key + " must not be null");
    return Status::Ok();
  }
  std::string known;
  for (const auto& [name, value] : names) {
    if (v->is_string() && v->get<std::string>() == name) {
      out = value;
      return Status::Ok();
    }
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  return c.Error("argument " + key + "=" + Dump(*v) + " is not supported (" + known + (null_allowed ? ", null" : "") +
                 ")");
}

Status TextVectorization(Config& c, LayerSpec& s) {
  TextSpec& t = s.text;
  using S = TextStandardize;
  RETURN_IF_ERROR(Choice<S>(c, "standardize",
                            {{"lower_and_strip_punctuation", S::kLowerAndStripPunctuation},
                             {"lower", S::kLower},
                             {"strip_punctuation", S::kStripPunctuation},
                             {"none", S::kNone}},
                            t.standardize, true));
  RETURN_IF_ERROR(Choice<TextSplit>(
      c, "split",
      {{"whitespace", TextSplit::kWhitespace}, {"character", TextSplit::kCharacter}, {"none", TextSplit::kNone}},
      t.split, true));
  RETURN_IF_ERROR(Choice<TextOutput>(
      c, "output_mode",
      {{"int", TextOutput::kInt}, {"multi_hot", TextOutput::kMultiHot}, {"count", TextOutput::kCount}}, t.output_mode,
      false));
  RETURN_IF_ERROR(c.Int("max_tokens", t.max_tokens));
  if (t.max_tokens < 0 || (t.max_tokens > 0 && t.max_tokens < (t.output_mode == TextOutput::kInt ? 3 : 2))) {
    return c.Error("argument max_tokens=" + std::to_string(t.max_tokens) +
                   " leaves no room for a term beside the special tokens");
  }
  RETURN_IF_ERROR(c.Int("output_sequence_length", t.output_sequence_length));
  if (t.output_sequence_length < 0) return c.Error("argument output_sequence_length must be positive");
  if (t.output_sequence_length > 0 && t.output_mode != TextOutput::kInt) {
    return c.Error("argument output_sequence_length is for output_mode \"int\" only, as in Keras");
  }
  RETURN_IF_ERROR(c.Bool("pad_to_max_tokens", t.pad_to_max_tokens));
  if (t.pad_to_max_tokens && t.output_mode != TextOutput::kInt && t.max_tokens == 0) {
    return c.Error("argument pad_to_max_tokens needs max_tokens");
  }
  RETURN_IF_ERROR(c.Null("ngrams"));
  RETURN_IF_ERROR(c.Null("idf_weights"));
  RETURN_IF_ERROR(c.Only("sparse", {false}, "only false"));
  RETURN_IF_ERROR(c.Only("ragged", {false}, "only false: sequences are padded"));
  RETURN_IF_ERROR(c.Only("encoding", {"utf-8"}, "only utf-8"));
  (void)c.Take("vocabulary_size");  // what the vocabulary gives anyway
  const json* v = c.Take("vocabulary");
  if (v && v->is_string()) {
    LookupSpec file;
    RETURN_IF_ERROR(
        ReadVocabularyFile(v->get<std::string>(), true, file).WithContext(c.where() + ": argument vocabulary"));
    t.vocabulary = std::move(file.tokens);
    t.has_vocabulary = true;
  } else if (v && v->is_array()) {
    for (const json& term : *v) {
      if (!term.is_string()) return c.Error("argument vocabulary holds " + Dump(term) + ", not a string");
      t.vocabulary.push_back(term.get<std::string>());
    }
    t.has_vocabulary = true;
  } else if (v) {
    return c.Error("argument vocabulary=" + Dump(*v) + " is not a list of terms or a file");
  }
  if (t.has_vocabulary) {
    TextSpec check = t;
    if (check.output_mode == TextOutput::kInt && check.output_sequence_length == 0) check.build_length = 1;
    auto made = TextVectorizer::Create(check);
    if (!made.ok()) return c.Error(made.status().message());
  }
  return Status::Ok();
}

struct Entry {
  std::string_view cls;
  LayerType type;
  Status (*parse)(Config&, LayerSpec&);
};

const Entry kLayers[] = {
    {"ReLU", LayerType::kReLU, ReLU},
    {"LeakyReLU", LayerType::kLeakyReLU, LeakyReLU},
    {"PReLU", LayerType::kPReLU, PReLU},
    {"ELU", LayerType::kELU, ELU},
    {"Softmax", LayerType::kSoftmax, Softmax},
    {"ThresholdedReLU", LayerType::kThresholdedReLU, ThresholdedReLU},
    {"Rescaling", LayerType::kRescaling, Rescaling},
    {"LayerNormalization", LayerType::kLayerNormalization, LayerNormalization},
    {"Permute", LayerType::kPermute, Permute},
    {"RepeatVector", LayerType::kRepeatVector, RepeatVector},
    {"SpatialDropout1D", LayerType::kSpatialDropout1D, DropoutLike},
    {"SpatialDropout2D", LayerType::kSpatialDropout2D, DropoutLike},
    {"GaussianNoise", LayerType::kGaussianNoise, GaussianNoise},
    {"GaussianDropout", LayerType::kGaussianDropout, DropoutLike},
    {"GlobalMaxPooling1D", LayerType::kGlobalMaxPooling1D, GlobalPooling},
    {"GlobalMaxPooling2D", LayerType::kGlobalMaxPooling2D, GlobalPooling},
    {"GlobalAveragePooling1D", LayerType::kGlobalAveragePooling1D, GlobalPooling},
    {"MaxPooling1D", LayerType::kMaxPooling1D, Pooling1D},
    {"AveragePooling1D", LayerType::kAveragePooling1D, Pooling1D},
    {"Conv1D", LayerType::kConv1D, Conv1D},
    {"ZeroPadding1D", LayerType::kZeroPadding1D, ZeroPadding1D},
    {"ZeroPadding2D", LayerType::kZeroPadding2D, ZeroPadding2D},
    {"Cropping1D", LayerType::kCropping1D, Cropping1D},
    {"Cropping2D", LayerType::kCropping2D, Cropping2D},
    {"UpSampling1D", LayerType::kUpSampling1D, UpSampling1D},
    {"UpSampling2D", LayerType::kUpSampling2D, UpSampling2D},
    {"DepthwiseConv2D", LayerType::kDepthwiseConv2D, [](Config& c, LayerSpec& s) { return Depthwise(c, s, false); }},
    {"SeparableConv2D", LayerType::kSeparableConv2D, [](Config& c, LayerSpec& s) { return Depthwise(c, s, true); }},
    {"Conv2DTranspose", LayerType::kConv2DTranspose, Conv2DTranspose},
    {"CategoryEncoding", LayerType::kCategoryEncoding, CategoryEncoding},
    {"Hashing", LayerType::kHashing, Hashing},
    {"SimpleRNN", LayerType::kSimpleRNN, Recurrent},
    {"LSTM", LayerType::kLSTM, Recurrent},
    {"GRU", LayerType::kGRU, Recurrent},
    {"Bidirectional", LayerType::kBidirectional, Bidirectional},
    {"TimeDistributed", LayerType::kTimeDistributed, TimeDistributed},
    {"Masking", LayerType::kMasking, [](Config& c, LayerSpec& s) { return c.Number("mask_value", s.masking_value); }},
    {"TextVectorization", LayerType::kTextVectorization, TextVectorization},
};

}  // namespace

StatusOr<bool> ParseMoreLayer(const std::string& cls, Config& c, LayerSpec& s) {
  for (const Entry& e : kLayers) {
    if (e.cls != cls) continue;
    s.type = e.type;
    // A Keras 3 GRU defaults to reset_after true; TF.js and tf.keras 1
    // write the key (false) when they mean otherwise.
    if (e.type == LayerType::kGRU) s.reset_after = true;
    // Hashing's dtype is its int64 output's.
    RETURN_IF_ERROR(c.Common(s, /*lookup=*/e.type == LayerType::kHashing || e.type == LayerType::kTextVectorization));
    RETURN_IF_ERROR(e.parse(c, s));
    return true;
  }
  return false;
}

std::string MoreLayerNames() {
  std::string names;
  for (const Entry& e : kLayers) names += ", " + std::string(e.cls);
  return names;
}

}  // namespace tfjob::model::keras
