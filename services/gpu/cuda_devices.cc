// Device, stream and memory management and the host-device transfers of
// the CUDA backend (cuda_devices.h).
#include "services/gpu/cuda_devices.h"

#include <cstdio>
#include <cstring>
#include <limits>

#include "services/gpu/cublas_library.h"
#include "services/gpu/kernels.h"

namespace tfjob::gpu::internal {

// A failing device is FAILED_PRECONDITION: the run cannot go on on this
// device, and fit reports it in one line with exit code 2, as it does any
// other condition it cannot train under.
Status Cuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  // An API call's failure also becomes the thread's last error; reported
  // here, it must not be reported again by the next kernel launch (which
  // reads cudaGetLastError). Sticky errors stay sticky regardless.
  cudaGetLastError();
  std::string msg = "CUDA error in " + what + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation) msg += " (the model, batch or optimizer state does not fit in the GPU's memory)";
  return FailedPrecondition(msg);
}

Status Launch(int e, const char* what) { return Cuda(static_cast<cudaError_t>(e), what); }

Status Blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return FailedPrecondition(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusString(s));
}

Status SameSize(const Tensor& a, const Tensor& b, const char* op) {
  if (a.size() != b.size() || a.dtype() != b.dtype()) {
    return InvalidArgument(std::string(op) + ": " + a.DebugString() + " and " + b.DebugString() + " differ");
  }
  return Status::Ok();
}

int CudaDevices::Count() {
  std::call_once(count_once_, [this] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error here
      n = 0;
    }
    count_ = n;
    devices_ = std::make_unique<PerDevice[]>(static_cast<size_t>(n));
  });
  return count_;
}

std::string CudaDevices::Description(int index) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) return "cuda:" + std::to_string(index);
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(p.totalGlobalMem) / (1 << 30));
  return std::string(p.name) + " (cuda:" + std::to_string(index) + ", " + mem + ", sm_" + std::to_string(p.major) +
         std::to_string(p.minor) + ")";
}

StatusOr<PerDevice*> CudaDevices::Get(int device) {
  const int n = Count();
  if (device < 0 || device >= n) {
    return FailedPrecondition("cuda:" + std::to_string(device) + " is not visible (" + std::to_string(n) +
                              " CUDA devices)");
  }
  PerDevice* d = &devices_[static_cast<size_t>(device)];
  std::call_once(d->init, [&] { d->init_status = Init(device, d); });
  if (!d->init_status.ok()) return d->init_status;
  return d;
}

StatusOr<PerDevice*> CudaDevices::Get(const Tensor& t) {
  if (!t.device().is_cuda()) return InvalidArgument("tensor " + t.DebugString() + " is not on a CUDA device");
  return Get(t.device().index);
}

Status CudaDevices::Init(int device, PerDevice* d) {
  DeviceGuard g(device);
  RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking), "cudaStreamCreate"));
  RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking), "cudaStreamCreate"));
  // Keep freed memory in the pool: a step's temporaries come back next step.
  cudaMemPool_t pool;
  RETURN_IF_ERROR(Cuda(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool"));
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  RETURN_IF_ERROR(
      Cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute"));
  RETURN_IF_ERROR(LoadCublas());
  RETURN_IF_ERROR(Blas(cublasCreate(&d->blas), "cublasCreate"));
  RETURN_IF_ERROR(Blas(cublasSetStream(d->blas, d->compute), "cublasSetStream"));
  // Full float32 products (no TF32), as the CPU and PyTorch's default compute them.
  RETURN_IF_ERROR(Blas(cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  return Status::Ok();
}

StatusOr<std::shared_ptr<std::byte[]>> CudaDevices::Allocate(int device, PerDevice* d, cudaStream_t stream,
                                                             size_t bytes) {
  DeviceGuard g(device);
  void* p = nullptr;
  // Never a zero-byte allocation: every tensor has a distinct address.
  RETURN_IF_ERROR(Cuda(cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, stream),
                       "cudaMallocAsync (" + std::to_string(bytes) + " bytes)"));
  cudaStream_t compute = d->compute;
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [device, compute](std::byte* q) {
    DeviceGuard g2(device);
    cudaFreeAsync(q, compute);
  });
}

StatusOr<Tensor> CudaDevices::UploadNew(const Tensor& host, int device) {
  if (!host.on_cpu()) return InvalidArgument("UploadNew: source " + host.DebugString() + " is not on the host");
  ASSIGN_OR_RETURN(PerDevice * d, Get(device));
  ASSIGN_OR_RETURN(auto buf, Allocate(device, d, d->copy, host.bytes()));
  Tensor t = Tensor::Wrap(host.dtype(), host.shape(), Device::Cuda(device), std::move(buf));
  RETURN_IF_ERROR(Stage(device, d, host, t));
  return t;
}

Status CudaDevices::Upload(const Tensor& host, Tensor& dst) {
  if (!host.on_cpu()) return InvalidArgument("Upload: source " + host.DebugString() + " is not on the host");
  RETURN_IF_ERROR(SameSize(host, dst, "Upload"));
  ASSIGN_OR_RETURN(PerDevice * d, Get(dst));
  // dst may still be in use by queued compute: the copy waits for it.
  cudaEvent_t tail;
  RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&tail, cudaEventDisableTiming), "cudaEventCreate"));
  Status s = Cuda(cudaEventRecord(tail, d->compute), "cudaEventRecord");
  if (s.ok()) s = Cuda(cudaStreamWaitEvent(d->copy, tail, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(tail);
  RETURN_IF_ERROR(s);
  return Stage(dst.device().index, d, host, dst);
}

Status CudaDevices::Download(const Tensor& src, Tensor& host) {
  if (!host.on_cpu()) return InvalidArgument("Download: destination " + host.DebugString() + " is not on the host");
  RETURN_IF_ERROR(SameSize(src, host, "Download"));
  ASSIGN_OR_RETURN(PerDevice * d, Get(src));
  DeviceGuard g(src.device().index);
  if (host.bytes() > 0) {
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(host.raw(), src.raw(), host.bytes(), cudaMemcpyDeviceToHost, d->compute),
                         "cudaMemcpyAsync (device to host)"));
  }
  return Cuda(cudaStreamSynchronize(d->compute), "cudaStreamSynchronize (download)");
}

Status CudaDevices::CopyOnDevice(const Tensor& src, Tensor& dst) {
  RETURN_IF_ERROR(SameSize(src, dst, "CopyOnDevice"));
  if (src.on_cpu() || dst.on_cpu()) return InvalidArgument("CopyOnDevice: both tensors must be on devices");
  ASSIGN_OR_RETURN(PerDevice * d, Get(dst));
  if (src.bytes() == 0) return Status::Ok();
  if (src.device() == dst.device()) {
    return Cuda(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, d->compute),
                "cudaMemcpyAsync (device to device)");
  }
  // Another device: wait for the source's queued work first.
  RETURN_IF_ERROR(Synchronize(src.device().index));
  return Cuda(
      cudaMemcpyPeerAsync(dst.raw(), dst.device().index, src.raw(), src.device().index, src.bytes(), d->compute),
      "cudaMemcpyPeerAsync");
}

Status CudaDevices::Synchronize(int device) {
  ASSIGN_OR_RETURN(PerDevice * d, Get(device));
  DeviceGuard g(device);
  RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(d->copy), "cudaStreamSynchronize (copy)"));
  RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(d->compute), "cudaStreamSynchronize"));
  return Cuda(cudaGetLastError(), "an earlier kernel");
}

// Copies host bytes into dst through a pinned block on the copy stream;
// the compute stream waits for the copy before its next work.
Status CudaDevices::Stage(int device, PerDevice* d, const Tensor& host, Tensor& dst) {
  if (host.bytes() == 0) return Status::Ok();
  DeviceGuard g(device);
  MutexLock lock(d->mu);
  ASSIGN_OR_RETURN(PinnedBlock * b, AcquirePinned(d, host.bytes()));
  std::memcpy(b->host, host.raw(), host.bytes());
  RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(dst.raw(), b->host, host.bytes(), cudaMemcpyHostToDevice, d->copy),
                       "cudaMemcpyAsync (host to device)"));
  RETURN_IF_ERROR(Cuda(cudaEventRecord(b->done, d->copy), "cudaEventRecord"));
  return Cuda(cudaStreamWaitEvent(d->compute, b->done, 0), "cudaStreamWaitEvent");
}

// A pinned block of at least `bytes` that no queued copy still reads.
StatusOr<PinnedBlock*> CudaDevices::AcquirePinned(PerDevice* d, size_t bytes) {
  PinnedBlock* best = nullptr;
  for (PinnedBlock& b : d->pinned) {
    if (b.bytes >= bytes && (!best || b.bytes < best->bytes) && cudaEventQuery(b.done) == cudaSuccess) best = &b;
  }
  if (best) return best;
  // A few blocks cover double-buffered inputs; beyond that, wait for the
  // oldest copy rather than pinning more memory.
  constexpr size_t kMaxBlocks = 16;
  if (d->pinned.size() >= kMaxBlocks) {
    for (PinnedBlock& b : d->pinned) {
      if (b.bytes >= bytes) {
        RETURN_IF_ERROR(Cuda(cudaEventSynchronize(b.done), "cudaEventSynchronize"));
        return &b;
      }
    }
    // None is large enough: replace the smallest.
    PinnedBlock* small = &d->pinned.front();
    for (PinnedBlock& b : d->pinned) {
      if (b.bytes < small->bytes) small = &b;
    }
    RETURN_IF_ERROR(Cuda(cudaEventSynchronize(small->done), "cudaEventSynchronize"));
    cudaFreeHost(small->host);
    cudaEventDestroy(small->done);
    *small = PinnedBlock{};
    RETURN_IF_ERROR(NewPinned(bytes, *small));
    return small;
  }
  d->pinned.emplace_back();
  RETURN_IF_ERROR(NewPinned(bytes, d->pinned.back()));
  return &d->pinned.back();
}

Status CudaDevices::NewPinned(size_t bytes, PinnedBlock& b) {
  size_t size = size_t{64} << 10;
  while (size < bytes) size <<= 1;
  void* p = nullptr;
  RETURN_IF_ERROR(Cuda(cudaHostAlloc(&p, size, cudaHostAllocDefault), "cudaHostAlloc"));
  b.host = static_cast<std::byte*>(p);
  b.bytes = size;
  return Cuda(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming), "cudaEventCreate");
}

StatusOr<const float*> CudaDevices::Ones(int device, PerDevice* d, int64_t n) {
  MutexLock lock(d->mu);
  if (d->ones_size >= n) return static_cast<const float*>(d->ones);
  DeviceGuard g(device);
  int64_t size = 1024;
  while (size < n) size <<= 1;
  float* p = nullptr;
  RETURN_IF_ERROR(
      Cuda(cudaMallocAsync(reinterpret_cast<void**>(&p), static_cast<size_t>(size) * sizeof(float), d->compute),
           "cudaMallocAsync (ones)"));
  RETURN_IF_ERROR(Launch(kernels::Fill(p, size, 1.f, d->compute), "Fill (ones)"));
  if (d->ones) cudaFreeAsync(d->ones, d->compute);
  d->ones = p;
  d->ones_size = size;
  return static_cast<const float*>(p);
}

}  // namespace tfjob::gpu::internal
