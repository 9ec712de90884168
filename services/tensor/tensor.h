// Dense, row-major tensors of float32 or int64, in host memory or in the
// memory of one CUDA device.
//
// Ownership: a Tensor is a cheap handle; copies share one buffer (like
// tf.Tensor). Kernels never modify their inputs; in-place updates (optimizer
// steps, scatter-add) are explicit and take a Tensor& whose buffer they write.
// Use Clone() (host) or Copy() (any device) for an independent copy.
//
// Device tensors: data<T>() is then a device pointer, for kernels only; their
// buffers come from the device backend (backend.h), which exists only in
// builds with CUDA and on machines with a GPU. Work on them is queued on the
// device's stream, so reading one on the host goes through ToDevice(Cpu()).
//
// Thread-safety: concurrent reads are safe; writes to a shared buffer need
// external synchronisation.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tfjob {

enum class DType : uint8_t { kFloat32 = 1, kInt64 = 2 };

std::string_view DTypeName(DType d);
size_t DTypeSize(DType d);

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kInt64;
}

using Shape = std::vector<int64_t>;

// Where a tensor's bytes live: host memory, or CUDA device `index` (an
// index among the devices CUDA_VISIBLE_DEVICES leaves visible).
struct Device {
  enum class Type : uint8_t { kCpu, kCuda };
  Type type = Type::kCpu;
  int index = 0;

  static Device Cpu() { return {}; }
  static Device Cuda(int i) { return {Type::kCuda, i}; }
  bool is_cpu() const { return type == Type::kCpu; }
  bool is_cuda() const { return type == Type::kCuda; }
  // "cpu", "cuda:0"
  std::string ToString() const;
  bool operator==(const Device&) const = default;
};

std::string ShapeString(const Shape& s);  // "[2, 3]"
// Product of dims; -1 if any dim is negative or the product overflows.
int64_t NumElements(const Shape& s);

class Tensor {
 public:
  // An empty float32 tensor of shape [0].
  Tensor();

  // Zero-filled. Fails on negative dims or absurd sizes.
  static StatusOr<Tensor> Create(DType dtype, Shape shape);
  // Contents unspecified: for callers that overwrite every byte at once
  // (deserialisation), sparing a pass over large buffers.
  static StatusOr<Tensor> CreateUninitialized(DType dtype, Shape shape);
  // For shapes already known to be valid (asserted).
  static Tensor Zeros(DType dtype, Shape shape);
  static StatusOr<Tensor> FromVector(Shape shape, std::vector<float> values);
  static StatusOr<Tensor> FromVector(Shape shape, std::vector<int64_t> values);
  static Tensor Scalar(float v);
  // On `device`: zero-filled, or with contents unspecified. Host tensors as
  // above; device tensors need the device backend (FAILED_PRECONDITION
  // without one) and may fail with RESOURCE_EXHAUSTED.
  static StatusOr<Tensor> Create(DType dtype, Shape shape, Device device);
  static StatusOr<Tensor> CreateUninitialized(DType dtype, Shape shape, Device device);
  // Wraps memory someone else owns (a staging buffer, a device allocation);
  // `keep` holds it alive while any handle to the tensor exists.
  static Tensor Wrap(DType dtype, Shape shape, Device device, std::shared_ptr<std::byte[]> keep, size_t offset = 0);

  Device device() const { return device_; }
  bool on_cpu() const { return device_.is_cpu(); }
  // A copy on `device` (this tensor itself when already there). A copy to
  // the host waits for the device's queued work, so its values are final.
  StatusOr<Tensor> ToDevice(Device device) const;
  // Independent copy on the same device.
  StatusOr<Tensor> Copy() const;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t size() const { return size_; }
  size_t bytes() const { return static_cast<size_t>(size_) * DTypeSize(dtype_); }

  template <typename T>
  T* data() {
    assert(dtype_ == DTypeOf<T>());
    return reinterpret_cast<T*>(buf_.get() + offset_);
  }
  template <typename T>
  const T* data() const {
    assert(dtype_ == DTypeOf<T>());
    return reinterpret_cast<const T*>(buf_.get() + offset_);
  }
  template <typename T>
  std::span<T> flat() {
    return {data<T>(), static_cast<size_t>(size_)};
  }
  template <typename T>
  std::span<const T> flat() const {
    return {data<T>(), static_cast<size_t>(size_)};
  }
  std::byte* raw() { return buf_.get() + offset_; }
  const std::byte* raw() const { return buf_.get() + offset_; }

  // Deep copy of a host tensor (asserted: device tensors use Copy()).
  Tensor Clone() const;
  // Same buffer, new shape with the same number of elements; one dim may be -1.
  StatusOr<Tensor> Reshape(Shape shape) const;
  // Rows [begin, end) along axis 0, sharing the buffer.
  StatusOr<Tensor> Rows(int64_t begin, int64_t end) const;

  // "float32[2, 3]", with "@cuda:0" for device tensors.
  std::string DebugString() const;
  bool SameBuffer(const Tensor& o) const { return buf_ == o.buf_ && offset_ == o.offset_; }

 private:
  Tensor(DType dtype, Shape shape, int64_t size, bool zero = true);

  DType dtype_ = DType::kFloat32;
  Device device_;
  Shape shape_{0};
  int64_t size_ = 0;
  std::shared_ptr<std::byte[]> buf_;
  size_t offset_ = 0;
};

// Equal dtype, shape and values (exact). Host tensors only.
bool Equal(const Tensor& a, const Tensor& b);
// Equal dtype and shape, float values within atol + rtol*|b|.
bool AllClose(const Tensor& a, const Tensor& b, float rtol = 1e-5f, float atol = 1e-6f);

}  // namespace tfjob
