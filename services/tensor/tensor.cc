#include "services/tensor/tensor.h"

#include "services/tensor/backend.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>

namespace tfjob {
namespace {

// 64-byte alignment keeps Eigen's vectorised loads on aligned paths.
constexpr size_t kAlign = 64;
// Refuse single tensors above 64 GiB: a size that large is a bug or bad input.
constexpr int64_t kMaxBytes = int64_t{64} << 30;

std::shared_ptr<std::byte[]> Allocate(size_t bytes, bool zero = true) {
  size_t n = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<std::byte*>(::operator new[](n, std::align_val_t(kAlign)));
  if (zero) std::memset(p, 0, n);
  return std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t(kAlign)); });
}

}  // namespace

std::string Device::ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::string_view DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
  }
  return "invalid";
}

size_t DTypeSize(DType d) { return d == DType::kInt64 ? 8 : 4; }

std::string ShapeString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

Tensor::Tensor() : buf_(Allocate(0)) {}

Tensor::Tensor(DType dtype, Shape shape, int64_t size, bool zero)
    : dtype_(dtype), shape_(std::move(shape)), size_(size), buf_(Allocate(size * DTypeSize(dtype), zero)) {}

StatusOr<Tensor> Tensor::CreateUninitialized(DType dtype, Shape shape) {
  int64_t n = NumElements(shape);
  if (n < 0) return InvalidArgument("invalid tensor shape " + ShapeString(shape));
  if (n > kMaxBytes / static_cast<int64_t>(DTypeSize(dtype))) {
    return ResourceExhausted("tensor of shape " + ShapeString(shape) + " is too large");
  }
  return Tensor(dtype, std::move(shape), n, /*zero=*/false);
}

StatusOr<Tensor> Tensor::Create(DType dtype, Shape shape) {
  ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype, std::move(shape)));
  if (t.size_) std::memset(t.raw(), 0, t.bytes());
  return t;
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  auto t = Create(dtype, std::move(shape));
  assert(t.ok());
  return std::move(t).value();
}

template <typename T>
static StatusOr<Tensor> FromVec(Shape shape, const std::vector<T>& v) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DTypeOf<T>(), std::move(shape)));
  if (static_cast<size_t>(t.size()) != v.size()) {
    return InvalidArgument("shape " + ShapeString(t.shape()) + " needs " + std::to_string(t.size()) + " values, got " +
                           std::to_string(v.size()));
  }
  if (!v.empty()) std::memcpy(t.data<T>(), v.data(), v.size() * sizeof(T));
  return t;
}

StatusOr<Tensor> Tensor::FromVector(Shape shape, std::vector<float> values) {
  return FromVec(std::move(shape), values);
}
StatusOr<Tensor> Tensor::FromVector(Shape shape, std::vector<int64_t> values) {
  return FromVec(std::move(shape), values);
}

Tensor Tensor::Scalar(float v) {
  Tensor t = Zeros(DType::kFloat32, {});
  t.data<float>()[0] = v;
  return t;
}

StatusOr<Tensor> Tensor::CreateUninitialized(DType dtype, Shape shape, Device device) {
  if (device.is_cpu()) return CreateUninitialized(dtype, std::move(shape));
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(device));
  int64_t n = NumElements(shape);
  if (n < 0) return InvalidArgument("invalid tensor shape " + ShapeString(shape));
  if (n > kMaxBytes / static_cast<int64_t>(DTypeSize(dtype))) {
    return ResourceExhausted("tensor of shape " + ShapeString(shape) + " is too large");
  }
  ASSIGN_OR_RETURN(auto buf, b->Allocate(device.index, static_cast<size_t>(n) * DTypeSize(dtype)));
  Tensor t = Wrap(dtype, std::move(shape), device, std::move(buf));
  return t;
}

StatusOr<Tensor> Tensor::Create(DType dtype, Shape shape, Device device) {
  if (device.is_cpu()) return Create(dtype, std::move(shape));
  ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype, std::move(shape), device));
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(device));
  RETURN_IF_ERROR(b->Fill(t, 0.f));
  return t;
}

Tensor Tensor::Wrap(DType dtype, Shape shape, Device device, std::shared_ptr<std::byte[]> keep, size_t offset) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.size_ = NumElements(shape);
  t.shape_ = std::move(shape);
  t.buf_ = std::move(keep);
  t.offset_ = offset;
  return t;
}

StatusOr<Tensor> Tensor::ToDevice(Device device) const {
  if (device == device_) return *this;
  if (device_.is_cpu()) {
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(device));
    return b->UploadNew(*this, device.index);
  }
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(device_));
  ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype_, shape_, device));
  if (device.is_cpu()) {
    RETURN_IF_ERROR(b->Download(*this, t));
  } else {
    RETURN_IF_ERROR(b->CopyOnDevice(*this, t));
  }
  return t;
}

StatusOr<Tensor> Tensor::Copy() const {
  if (device_.is_cpu()) return Clone();
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(device_));
  ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype_, shape_, device_));
  RETURN_IF_ERROR(b->CopyOnDevice(*this, t));
  return t;
}

Tensor Tensor::Clone() const {
  assert(device_.is_cpu());
  Tensor t(dtype_, shape_, size_);
  if (size_) std::memcpy(t.raw(), raw(), bytes());
  return t;
}

StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) return InvalidArgument("reshape to " + ShapeString(shape) + ": more than one -1");
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return InvalidArgument("reshape to invalid shape " + ShapeString(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || size_ % known != 0) {
      return InvalidArgument("cannot reshape " + ShapeString(shape_) + " to " + ShapeString(shape));
    }
    shape[infer] = size_ / known;
  }
  if (NumElements(shape) != size_) {
    return InvalidArgument("cannot reshape " + ShapeString(shape_) + " to " + ShapeString(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

StatusOr<Tensor> Tensor::Rows(int64_t begin, int64_t end) const {
  if (rank() == 0) return InvalidArgument("Rows of a scalar");
  if (begin < 0 || end < begin || end > shape_[0]) {
    return OutOfRange("rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + ShapeString(shape_));
  }
  int64_t row = shape_[0] == 0 ? 0 : size_ / shape_[0];
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.size_ = row * (end - begin);
  t.offset_ = offset_ + static_cast<size_t>(begin * row) * DTypeSize(dtype_);
  return t;
}

std::string Tensor::DebugString() const {
  std::string s = std::string(DTypeName(dtype_)) + ShapeString(shape_);
  if (!device_.is_cpu()) {
    s += '@';
    s += device_.ToString();
  }
  return s;
}

bool Equal(const Tensor& a, const Tensor& b) {
  if (!a.on_cpu() || !b.on_cpu()) return false;
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

bool AllClose(const Tensor& a, const Tensor& b, float rtol, float atol) {
  if (!a.on_cpu() || !b.on_cpu()) return false;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DType::kInt64) return Equal(a, b);
  auto x = a.flat<float>();
  auto y = b.flat<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

}  // namespace tfjob
