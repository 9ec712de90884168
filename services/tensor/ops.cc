#include "services/tensor/ops.h"

#include <cmath>
#include <cstring>

#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"
#include "services/tensor/gemm.h"

namespace tfjob::ops {
namespace {

// Device tensors: the same checks, then the backend's kernel on the device
// the inputs share (see backend.h).
StatusOr<device::Backend*> DeviceOf(const char* op, std::initializer_list<const Tensor*> ts) {
  RETURN_IF_ERROR(device::CheckSameDevice(op, ts));
  return device::BackendFor((*ts.begin())->device());
}

bool OnDevice(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->on_cpu()) return true;
  }
  return false;
}

StatusOr<Tensor> Empty(DType dtype, Shape shape, Device d) {
  return Tensor::CreateUninitialized(dtype, std::move(shape), d);
}

Status NeedF32(const Tensor& t, const char* op, const char* arg) {
  if (t.dtype() != DType::kFloat32) {
    return InvalidArgument(std::string(op) + ": " + arg + " must be float32, got " + t.DebugString());
  }
  return Status::Ok();
}

Status NeedIndices(const Tensor& t, const char* op) {
  if (t.dtype() != DType::kInt64) {
    return InvalidArgument(std::string(op) + ": indices must be int64, got " + t.DebugString());
  }
  return Status::Ok();
}

enum class BinOp { kAdd, kSub, kMul, kDiv };

StatusOr<Tensor> Binary(const Tensor& a, const Tensor& b, BinOp op, const char* name) {
  RETURN_IF_ERROR(NeedF32(a, name, "lhs"));
  RETURN_IF_ERROR(NeedF32(b, name, "rhs"));
  if (OnDevice({&a, &b})) {
    bool suffix = b.rank() < a.rank() && b.size() > 0;
    for (int i = 0; suffix && i < b.rank(); ++i) suffix = b.dim(i) == a.dim(a.rank() - b.rank() + i);
    if (a.shape() != b.shape() && !(b.size() == 1 && b.rank() <= a.rank()) && !suffix) {
      return InvalidArgument(std::string(name) + ": incompatible shapes " + ShapeString(a.shape()) + " and " +
                             ShapeString(b.shape()));
    }
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf(name, {&a, &b}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, a.shape(), a.device()));
    const device::Binary d = op == BinOp::kAdd   ? device::Binary::kAdd
                             : op == BinOp::kSub ? device::Binary::kSub
                             : op == BinOp::kMul ? device::Binary::kMul
                                                 : device::Binary::kDiv;
    RETURN_IF_ERROR(be->BinaryOp(d, a, b, out));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, a.shape());
  auto x = AsArray(a);
  auto o = AsArray(out);
  auto apply = [op](auto lhs, auto rhs, auto dst) {
    switch (op) {
      case BinOp::kAdd: dst = lhs + rhs; break;
      case BinOp::kSub: dst = lhs - rhs; break;
      case BinOp::kMul: dst = lhs * rhs; break;
      case BinOp::kDiv: dst = lhs / rhs; break;
    }
  };
  if (a.shape() == b.shape()) {
    apply(x, AsArray(b), o);
    return out;
  }
  if (b.size() == 1 && b.rank() <= a.rank()) {
    float s = b.data<float>()[0];
    apply(x, Eigen::ArrayXf::Constant(x.size(), s), o);
    return out;
  }
  // Suffix broadcast: b.shape must equal the last b.rank() dims of a.
  bool suffix = b.rank() < a.rank();
  for (int i = 0; suffix && i < b.rank(); ++i) suffix = b.dim(i) == a.dim(a.rank() - b.rank() + i);
  if (!suffix || b.size() == 0) {
    return InvalidArgument(std::string(name) + ": incompatible shapes " + ShapeString(a.shape()) + " and " +
                           ShapeString(b.shape()));
  }
  int64_t cols = b.size();
  int64_t rows = a.size() / cols;
  Eigen::Map<const Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> xa(a.data<float>(), rows,
                                                                                            cols);
  Eigen::Map<Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> oa(out.data<float>(), rows, cols);
  Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>> ba(b.data<float>(), cols);
  apply(xa, ba.replicate(rows, 1), oa);
  return out;
}

template <typename F>
StatusOr<Tensor> Unary(const Tensor& a, const char* name, F f, device::Unary dop) {
  RETURN_IF_ERROR(NeedF32(a, name, "input"));
  if (!a.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf(name, {&a}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, a.shape(), a.device()));
    RETURN_IF_ERROR(be->UnaryOp(dop, a, out));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, a.shape());
  AsArray(out) = f(AsArray(a));
  return out;
}

StatusOr<int> NormalizeAxis(const Tensor& a, int axis, const char* name) {
  if (axis < 0) axis += a.rank();
  if (axis < 0 || axis >= a.rank()) {
    return InvalidArgument(std::string(name) + ": axis out of range for shape " + ShapeString(a.shape()));
  }
  return axis;
}

enum class Reduce { kSum, kMean, kMax };

StatusOr<Tensor> DeviceReduction(const Tensor& a, int64_t outer, int64_t n, int64_t inner, Shape out_shape, Reduce kind,
                                 const char* name) {
  ASSIGN_OR_RETURN(device::Backend * be, DeviceOf(name, {&a}));
  ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, std::move(out_shape), a.device()));
  const device::Reduce d = kind == Reduce::kSum    ? device::Reduce::kSum
                           : kind == Reduce::kMean ? device::Reduce::kMean
                                                   : device::Reduce::kMax;
  RETURN_IF_ERROR(be->ReduceAxis(d, a, outer, n, inner, out));
  return out;
}

StatusOr<Tensor> Reduction(const Tensor& a, int axis, Reduce kind, const char* name) {
  RETURN_IF_ERROR(NeedF32(a, name, "input"));
  if (axis == kAllAxes && !a.on_cpu()) {
    if (kind == Reduce::kMax && a.size() == 0) return InvalidArgument(std::string(name) + ": empty input");
    return DeviceReduction(a, 1, a.size(), 1, Shape{}, kind, name);
  }
  if (axis == kAllAxes) {
    if (kind == Reduce::kMax && a.size() == 0) return InvalidArgument(std::string(name) + ": empty input");
    auto x = AsArray(a);
    float v = kind == Reduce::kMax ? x.maxCoeff() : x.sum();
    if (kind == Reduce::kMean) v = a.size() ? v / static_cast<float>(a.size()) : NAN;
    return Tensor::Scalar(v);
  }
  ASSIGN_OR_RETURN(int ax, NormalizeAxis(a, axis, name));
  int64_t outer = 1, inner = 1, n = a.dim(ax);
  for (int i = 0; i < ax; ++i) outer *= a.dim(i);
  for (int i = ax + 1; i < a.rank(); ++i) inner *= a.dim(i);
  if (kind == Reduce::kMax && n == 0) return InvalidArgument(std::string(name) + ": empty axis");
  Shape out_shape = a.shape();
  out_shape.erase(out_shape.begin() + ax);
  if (!a.on_cpu()) return DeviceReduction(a, outer, n, inner, std::move(out_shape), kind, name);
  Tensor out = Tensor::Zeros(DType::kFloat32, out_shape);
  const float* x = a.data<float>();
  float* o = out.data<float>();
  for (int64_t p = 0; p < outer; ++p) {
    for (int64_t q = 0; q < inner; ++q) {
      const float* base = x + p * n * inner + q;
      float acc = kind == Reduce::kMax ? -INFINITY : 0.f;
      for (int64_t k = 0; k < n; ++k) {
        float v = base[k * inner];
        acc = kind == Reduce::kMax ? std::max(acc, v) : acc + v;
      }
      if (kind == Reduce::kMean) acc /= static_cast<float>(n);
      o[p * inner + q] = acc;
    }
  }
  return out;
}

Status NeedRowsLastAxis(const Tensor& a, const char* name) {
  RETURN_IF_ERROR(NeedF32(a, name, "input"));
  if (a.rank() < 1) return InvalidArgument(std::string(name) + ": input must have rank >= 1");
  return Status::Ok();
}

}  // namespace

StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  RETURN_IF_ERROR(NeedF32(a, "MatMul", "a"));
  RETURN_IF_ERROR(NeedF32(b, "MatMul", "b"));
  if (a.rank() != 2 || b.rank() != 2) {
    return InvalidArgument("MatMul: operands must be 2-D, got " + ShapeString(a.shape()) + " and " +
                           ShapeString(b.shape()));
  }
  int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  int64_t k2 = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != k2) {
    return InvalidArgument("MatMul: inner dimensions differ: " + ShapeString(a.shape()) + (ta ? "^T" : "") + " x " +
                           ShapeString(b.shape()) + (tb ? "^T" : ""));
  }
  if (OnDevice({&a, &b})) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("MatMul", {&a, &b}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, {m, n}, a.device()));
    RETURN_IF_ERROR(be->MatMul(a, ta, b, tb, out, 0.f));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, {m, n});
  Gemm(ta, tb, m, n, k, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), 0.f, out.data<float>(), n);
  return out;
}

StatusOr<Tensor> Transpose(const Tensor& a) {
  RETURN_IF_ERROR(NeedF32(a, "Transpose", "input"));
  if (a.rank() != 2) return InvalidArgument("Transpose: input must be 2-D, got " + ShapeString(a.shape()));
  if (!a.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("Transpose", {&a}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, {a.dim(1), a.dim(0)}, a.device()));
    RETURN_IF_ERROR(be->Transpose(a, out));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, {a.dim(1), a.dim(0)});
  Eigen::Map<RowMatrix>(out.data<float>(), a.dim(1), a.dim(0)) =
      Eigen::Map<const RowMatrix>(a.data<float>(), a.dim(0), a.dim(1)).transpose();
  return out;
}

StatusOr<Tensor> Add(const Tensor& a, const Tensor& b) { return Binary(a, b, BinOp::kAdd, "Add"); }
StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b) { return Binary(a, b, BinOp::kSub, "Sub"); }
StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) { return Binary(a, b, BinOp::kMul, "Mul"); }
StatusOr<Tensor> Div(const Tensor& a, const Tensor& b) { return Binary(a, b, BinOp::kDiv, "Div"); }
StatusOr<Tensor> Scale(const Tensor& a, float s) {
  RETURN_IF_ERROR(NeedF32(a, "Scale", "input"));
  if (!a.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("Scale", {&a}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, a.shape(), a.device()));
    RETURN_IF_ERROR(be->Scale(a, s, out));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, a.shape());
  AsArray(out) = AsArray(a) * s;
  return out;
}

using U = device::Unary;
StatusOr<Tensor> Relu(const Tensor& a) {
  return Unary(
      a, "Relu", [](auto x) { return x.max(0.f); }, U::kRelu);
}
StatusOr<Tensor> Sigmoid(const Tensor& a) {
  return Unary(
      a, "Sigmoid", [](auto x) { return (1.f + (-x).exp()).inverse(); }, U::kSigmoid);
}
StatusOr<Tensor> Tanh(const Tensor& a) {
  return Unary(
      a, "Tanh", [](auto x) { return x.tanh(); }, U::kTanh);
}
StatusOr<Tensor> Exp(const Tensor& a) {
  return Unary(
      a, "Exp", [](auto x) { return x.exp(); }, U::kExp);
}
StatusOr<Tensor> Log(const Tensor& a) {
  return Unary(
      a, "Log", [](auto x) { return x.log(); }, U::kLog);
}
StatusOr<Tensor> Square(const Tensor& a) {
  return Unary(
      a, "Square", [](auto x) { return x.square(); }, U::kSquare);
}

StatusOr<Tensor> ReduceSum(const Tensor& a, int axis) { return Reduction(a, axis, Reduce::kSum, "ReduceSum"); }
StatusOr<Tensor> ReduceMean(const Tensor& a, int axis) { return Reduction(a, axis, Reduce::kMean, "ReduceMean"); }
StatusOr<Tensor> ReduceMax(const Tensor& a, int axis) { return Reduction(a, axis, Reduce::kMax, "ReduceMax"); }

StatusOr<Tensor> ArgMax(const Tensor& a) {
  RETURN_IF_ERROR(NeedRowsLastAxis(a, "ArgMax"));
  int64_t n = a.dim(-1);
  if (n == 0) return InvalidArgument("ArgMax: empty last axis");
  Shape s = a.shape();
  s.pop_back();
  if (!a.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("ArgMax", {&a}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kInt64, s, a.device()));
    RETURN_IF_ERROR(be->ArgMax(a, out));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kInt64, s);
  const float* x = a.data<float>();
  int64_t* o = out.data<int64_t>();
  for (int64_t r = 0; r < out.size(); ++r) {
    const float* row = x + r * n;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (row[j] > row[best]) best = j;
    o[r] = best;
  }
  return out;
}

namespace {

// Softmax or log-softmax over the last axis, both shifted by the row's
// maximum so exp never overflows.
StatusOr<Tensor> SoftmaxRows(const Tensor& a, bool log, const char* what) {
  RETURN_IF_ERROR(NeedRowsLastAxis(a, what));
  if (!a.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf(what, {&a}));
    ASSIGN_OR_RETURN(Tensor out, Empty(DType::kFloat32, a.shape(), a.device()));
    if (a.size() > 0) RETURN_IF_ERROR(be->Softmax(a, log, out));
    return out;
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, a.shape());
  if (a.size() == 0) return out;
  int64_t n = a.dim(-1), rows = a.size() / n;
  Eigen::Map<const RowMatrix> x(a.data<float>(), rows, n);
  Eigen::Map<RowMatrix> o(out.data<float>(), rows, n);
  if (log) {
    o = x.colwise() - x.rowwise().maxCoeff();
    Eigen::VectorXf lse = o.array().exp().rowwise().sum().log();
    o.colwise() -= lse;
  } else {
    o = (x.colwise() - x.rowwise().maxCoeff()).array().exp().matrix();
    o.array().colwise() /= o.rowwise().sum().array();
  }
  return out;
}

}  // namespace

StatusOr<Tensor> Softmax(const Tensor& a) { return SoftmaxRows(a, false, "Softmax"); }

StatusOr<Tensor> LogSoftmax(const Tensor& a) { return SoftmaxRows(a, true, "LogSoftmax"); }

StatusOr<Tensor> Gather(const Tensor& params, const Tensor& indices) {
  RETURN_IF_ERROR(NeedIndices(indices, "Gather"));
  if (params.rank() < 1) return InvalidArgument("Gather: params must have rank >= 1");
  int64_t rows = params.dim(0);
  int64_t row = rows == 0 ? 0 : params.size() / rows;
  Shape s = indices.shape();
  s.insert(s.end(), params.shape().begin() + 1, params.shape().end());
  if (OnDevice({&params, &indices})) {
    // Indices on the device cannot be range-checked without waiting for
    // them; the kernel clamps, and callers check ids where they are made.
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("Gather", {&params, &indices}));
    if (params.dtype() != DType::kFloat32) return InvalidArgument("Gather: device params must be float32");
    ASSIGN_OR_RETURN(Tensor out, Empty(params.dtype(), s, params.device()));
    RETURN_IF_ERROR(be->Gather(params, indices, out));
    return out;
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(params.dtype(), s));
  size_t row_bytes = static_cast<size_t>(row) * DTypeSize(params.dtype());
  const int64_t* ids = indices.data<int64_t>();
  for (int64_t i = 0; i < indices.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return OutOfRange("Gather: index " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                        " is outside [0, " + std::to_string(rows) + ")");
    }
    std::memcpy(out.raw() + i * row_bytes, params.raw() + ids[i] * row_bytes, row_bytes);
  }
  return out;
}

Status ScatterAdd(Tensor& ref, const Tensor& indices, const Tensor& updates) {
  RETURN_IF_ERROR(NeedIndices(indices, "ScatterAdd"));
  RETURN_IF_ERROR(NeedF32(ref, "ScatterAdd", "ref"));
  RETURN_IF_ERROR(NeedF32(updates, "ScatterAdd", "updates"));
  if (ref.rank() < 1) return InvalidArgument("ScatterAdd: ref must have rank >= 1");
  Shape want = indices.shape();
  want.insert(want.end(), ref.shape().begin() + 1, ref.shape().end());
  if (updates.shape() != want) {
    return InvalidArgument("ScatterAdd: updates shape " + ShapeString(updates.shape()) + " should be " +
                           ShapeString(want));
  }
  if (OnDevice({&ref, &indices, &updates})) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("ScatterAdd", {&ref, &indices, &updates}));
    return be->ScatterAdd(ref, indices, updates);
  }
  int64_t rows = ref.dim(0);
  int64_t row = rows == 0 ? 0 : ref.size() / rows;
  const int64_t* ids = indices.data<int64_t>();
  for (int64_t i = 0; i < indices.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return OutOfRange("ScatterAdd: index " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                        " is outside [0, " + std::to_string(rows) + ")");
    }
  }
  float* r = ref.data<float>();
  const float* u = updates.data<float>();
  for (int64_t i = 0; i < indices.size(); ++i) {
    Eigen::Map<Eigen::ArrayXf>(r + ids[i] * row, row) += Eigen::Map<const Eigen::ArrayXf>(u + i * row, row);
  }
  return Status::Ok();
}

StatusOr<Tensor> Cast(const Tensor& a, DType to) {
  if (a.dtype() == to) return a.Copy();
  if (!a.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, DeviceOf("Cast", {&a}));
    ASSIGN_OR_RETURN(Tensor out, Empty(to, a.shape(), a.device()));
    RETURN_IF_ERROR(be->Cast(a, out));
    return out;
  }
  Tensor out = Tensor::Zeros(to, a.shape());
  if (to == DType::kFloat32) {
    const int64_t* x = a.data<int64_t>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < a.size(); ++i) o[i] = static_cast<float>(x[i]);
  } else {
    const float* x = a.data<float>();
    int64_t* o = out.data<int64_t>();
    for (int64_t i = 0; i < a.size(); ++i) {
      if (!std::isfinite(x[i]) || std::fabs(x[i]) > 9.2e18f) {
        return InvalidArgument("Cast: value " + std::to_string(x[i]) + " at " + std::to_string(i) +
                               " does not fit int64");
      }
      o[i] = static_cast<int64_t>(x[i]);
    }
  }
  return out;
}

StatusOr<Tensor> Stack(const std::vector<Tensor>& parts) {
  if (parts.empty()) return InvalidArgument("Stack: no tensors");
  const Tensor& first = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].dtype() != first.dtype() || parts[i].shape() != first.shape()) {
      return InvalidArgument("Stack: element " + std::to_string(i) + " is " + parts[i].DebugString() +
                             ", element 0 is " + first.DebugString());
    }
  }
  Shape s = first.shape();
  s.insert(s.begin(), static_cast<int64_t>(parts.size()));
  if (!first.on_cpu()) {
    std::vector<Tensor> rows;
    for (const Tensor& p : parts) {
      Shape one = p.shape();
      one.insert(one.begin(), 1);
      ASSIGN_OR_RETURN(Tensor r, p.Reshape(one));
      rows.push_back(std::move(r));
    }
    return Concat(rows);
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(first.dtype(), s));
  size_t b = first.bytes();
  for (size_t i = 0; i < parts.size(); ++i) std::memcpy(out.raw() + i * b, parts[i].raw(), b);
  return out;
}

StatusOr<Tensor> Concat(const std::vector<Tensor>& parts) {
  if (parts.empty()) return InvalidArgument("Concat: no tensors");
  const Tensor& first = parts.front();
  if (first.rank() < 1) return InvalidArgument("Concat: scalars cannot be concatenated");
  int64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    if (p.dtype() != first.dtype() || p.rank() != first.rank() ||
        !std::equal(p.shape().begin() + 1, p.shape().end(), first.shape().begin() + 1)) {
      return InvalidArgument("Concat: element " + std::to_string(i) + " is " + p.DebugString() + ", element 0 is " +
                             first.DebugString());
    }
    rows += p.dim(0);
  }
  Shape s = first.shape();
  s[0] = rows;
  if (!first.on_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * be, device::BackendFor(first.device()));
    ASSIGN_OR_RETURN(Tensor out, Empty(first.dtype(), s, first.device()));
    int64_t at = 0;
    for (const Tensor& p : parts) {
      if (p.device() != first.device()) return InvalidArgument("Concat: tensors on different devices");
      ASSIGN_OR_RETURN(Tensor dst, out.Rows(at, at + p.dim(0)));
      RETURN_IF_ERROR(be->CopyOnDevice(p, dst));
      at += p.dim(0);
    }
    return out;
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(first.dtype(), s));
  size_t off = 0;
  for (const Tensor& p : parts) {
    std::memcpy(out.raw() + off, p.raw(), p.bytes());
    off += p.bytes();
  }
  return out;
}

}  // namespace tfjob::ops
