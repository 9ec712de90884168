// The NCCL implementation behind nccl.h (library tfjob_collective_nccl,
// built only where CUDA and NCCL were found). RegisterNccl() makes
// nccl.h's functions use it; binaries that carry CUDA call it at start-up
// (gpu::RegisterBackend).
#include "services/collective/nccl.h"
#include "services/collective/nccl_library.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>

#include "services/tensor/backend.h"
#include <cstring>
#include <thread>

namespace tfjob::collective {
namespace {

using Clock = std::chrono::steady_clock;

Status FromCuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  return Internal("collective (nccl): " + what + ": " + cudaGetErrorString(e));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& control, int device, Options o) : control_(control), device_(device), o_(o) {}

  ~NcclCommunicator() override {
    if (comm_) {
      // Destroying waits for pending work; after a failure nothing may wait.
      if (failed_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    if (stream_) cudaStreamDestroy(stream_);
    if (device_buf_) cudaFree(device_buf_);
    if (host_buf_) cudaFreeHost(host_buf_);
  }

  Status Init() {
    std::string id_bytes;
    if (control_.rank() == 0) {
      ncclUniqueId id;
      RETURN_IF_ERROR(Check(ncclGetUniqueId(&id), "ncclGetUniqueId"));
      id_bytes.assign(id.internal, sizeof id.internal);
    }
    // The id travels over the group's own control channel.
    RETURN_IF_ERROR(control_.BroadcastBytes(id_bytes, 0));
    if (id_bytes.size() != sizeof(ncclUniqueId::internal)) return Internal("collective (nccl): malformed unique id");
    ncclUniqueId id;
    std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
    RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "cudaSetDevice"));
    RETURN_IF_ERROR(FromCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so a member that never joins cannot hang this one
    ncclResult_t r = ncclCommInitRankConfig(&comm_, control_.size(), id, control_.rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) return Check(r, "ncclCommInitRank");
    return WaitComm("joining the NCCL communicator");
  }

  int rank() const override { return control_.rank(); }
  int size() const override { return control_.size(); }
  int64_t generation() const override { return control_.generation(); }
  std::string_view implementation() const override { return "nccl"; }
  using Communicator::AllReduce;

  Status AllReduce(std::span<Tensor* const> tensors, ReduceOp op) override {
    RETURN_IF_ERROR(error_);
    size_t bytes = 0;
    for (Tensor* t : tensors) {
      if (t->dtype() != DType::kFloat32)
        return Fail(InvalidArgument("collective: all_reduce takes float32 tensors, got " + t->DebugString()));
      bytes += t->bytes();
    }
    RETURN_IF_ERROR(Agree("all_reduce", tensors, -1));
    const ncclRedOp_t red = op == ReduceOp::kMean ? ncclAvg : ncclSum;
    ASSIGN_OR_RETURN(bool on_device, OnThisDevice(tensors));
    if (on_device) {
      // In place on the device: no staging.
      RETURN_IF_ERROR(Enqueue(ncclGroupStart(), "ncclGroupStart"));
      for (Tensor* t : tensors) {
        if (t->size() == 0) continue;
        RETURN_IF_ERROR(
            Enqueue(ncclAllReduce(t->raw(), t->raw(), static_cast<size_t>(t->size()), ncclFloat, red, comm_, stream_),
                    "ncclAllReduce"));
      }
      RETURN_IF_ERROR(Enqueue(ncclGroupEnd(), "ncclGroupEnd"));
      return Wait("all_reduce");
    }
    RETURN_IF_ERROR(Stage(tensors, bytes, true));
    RETURN_IF_ERROR(
        Enqueue(ncclAllReduce(device_buf_, device_buf_, bytes / sizeof(float), ncclFloat, red, comm_, stream_),
                "ncclAllReduce"));
    return Unstage(tensors, bytes);
  }

  StatusOr<Tensor> AllGather(const Tensor& in) override {
    RETURN_IF_ERROR(error_);
    Shape shape = in.shape();
    if (shape.empty()) shape = {1};
    shape[0] *= size();
    ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(in.dtype(), shape));
    Tensor copy = in;
    Tensor* p[] = {&copy};
    RETURN_IF_ERROR(Agree("all_gather", p, -1));
    const size_t block = in.bytes();
    RETURN_IF_ERROR(Reserve(block * static_cast<size_t>(size())));
    std::memcpy(host_buf_, in.raw(), block);
    std::byte* send = static_cast<std::byte*>(device_buf_) + static_cast<size_t>(rank()) * block;
    RETURN_IF_ERROR(
        Enqueue(cudaMemcpyAsync(send, host_buf_, block, cudaMemcpyHostToDevice, stream_), "copy to device"));
    RETURN_IF_ERROR(Enqueue(ncclAllGather(send, device_buf_, block, ncclInt8, comm_, stream_), "ncclAllGather"));
    RETURN_IF_ERROR(
        Enqueue(cudaMemcpyAsync(host_buf_, device_buf_, out.bytes(), cudaMemcpyDeviceToHost, stream_), "copy to host"));
    RETURN_IF_ERROR(Wait("all_gather"));
    std::memcpy(out.raw(), host_buf_, out.bytes());
    return out;
  }

  Status Broadcast(std::span<Tensor* const> tensors, int root) override {
    RETURN_IF_ERROR(error_);
    if (root < 0 || root >= size())
      return Fail(InvalidArgument("collective: broadcast from rank " + std::to_string(root)));
    size_t bytes = 0;
    for (Tensor* t : tensors) bytes += t->bytes();
    RETURN_IF_ERROR(Agree("broadcast", tensors, root));
    ASSIGN_OR_RETURN(bool on_device, OnThisDevice(tensors));
    if (on_device) {
      RETURN_IF_ERROR(Enqueue(ncclGroupStart(), "ncclGroupStart"));
      for (Tensor* t : tensors) {
        if (t->bytes() == 0) continue;
        RETURN_IF_ERROR(
            Enqueue(ncclBroadcast(t->raw(), t->raw(), t->bytes(), ncclInt8, root, comm_, stream_), "ncclBroadcast"));
      }
      RETURN_IF_ERROR(Enqueue(ncclGroupEnd(), "ncclGroupEnd"));
      return Wait("broadcast");
    }
    RETURN_IF_ERROR(Stage(tensors, bytes, rank() == root));
    RETURN_IF_ERROR(
        Enqueue(ncclBroadcast(device_buf_, device_buf_, bytes, ncclInt8, root, comm_, stream_), "ncclBroadcast"));
    return Unstage(tensors, bytes);
  }

  Status Barrier() override {
    Tensor t = Tensor::Scalar(0);
    return AllReduce(t, ReduceOp::kSum);
  }

  void Abort(const Status& reason) override {
    (void)Fail(reason);
    control_.Abort(reason);
  }

 private:
  Status Check(ncclResult_t r, const std::string& what) {
    if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
    const Code code = r == ncclInvalidArgument || r == ncclInvalidUsage ? Code::kInvalidArgument : Code::kUnavailable;
    return Status(code,
                  "collective (nccl): " + what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(comm_) + ")");
  }

  // True when every tensor lives on this member's CUDA device (reduced in
  // place, after the device's queued work: the gradients being reduced are
  // still being computed on the backend's stream); false when all are on
  // the host (staged); INVALID_ARGUMENT for a mixture or another device.
  StatusOr<bool> OnThisDevice(std::span<Tensor* const> tensors) {
    size_t on = 0;
    for (Tensor* t : tensors) {
      if (t->on_cpu()) continue;
      if (t->device() != Device::Cuda(device_)) {
        return Fail(InvalidArgument("collective (nccl): tensor " + t->DebugString() +
                                    " is not on this member's cuda:" + std::to_string(device_)));
      }
      ++on;
    }
    if (on == 0) return false;
    if (on != tensors.size())
      return Fail(InvalidArgument("collective (nccl): host and device tensors in one operation"));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(Device::Cuda(device_)));
    Status s = b->Synchronize(device_);
    if (!s.ok()) return Fail(s);
    return true;
  }

  Status Fail(const Status& s) {
    if (error_.ok()) error_ = s;
    failed_ = true;
    return error_;
  }

  Status WaitComm(const std::string& what) {
    const auto deadline = Clock::now() + o_.timeout;
    while (true) {
      ncclResult_t r = ncclSuccess;
      ncclCommGetAsyncError(comm_, &r);
      if (r == ncclSuccess) return Status::Ok();
      if (r != ncclInProgress) return Fail(Check(r, what));
      if (Clock::now() > deadline) {
        return Fail(
            DeadlineExceeded("collective (nccl): " + what + " took longer than the timeout: a member is hung or gone"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  Status Enqueue(ncclResult_t r, const std::string& what) {
    if (r == ncclInProgress) return WaitComm(what);
    if (r != ncclSuccess) return Fail(Check(r, what));
    return Status::Ok();
  }
  Status Enqueue(cudaError_t e, const std::string& what) {
    Status s = FromCuda(e, what);
    return s.ok() ? s : Fail(s);
  }

  // Waits for the stream, watching NCCL's asynchronous errors and the clock.
  Status Wait(const std::string& what) {
    const auto deadline = Clock::now() + o_.timeout;
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return Fail(FromCuda(e, what));
      ncclResult_t r = ncclSuccess;
      ncclCommGetAsyncError(comm_, &r);
      if (r != ncclSuccess && r != ncclInProgress) return Fail(Check(r, what));
      if (Clock::now() > deadline) {
        return Fail(DeadlineExceeded("collective (nccl): " + what +
                                     " did not finish within the timeout: a member is hung or gone"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  Status Reserve(size_t bytes) {
    if (bytes <= capacity_) return Status::Ok();
    if (device_buf_) cudaFree(device_buf_);
    if (host_buf_) cudaFreeHost(host_buf_);
    device_buf_ = nullptr;
    host_buf_ = nullptr;
    capacity_ = 0;
    RETURN_IF_ERROR(Enqueue(cudaMalloc(&device_buf_, bytes), "cudaMalloc"));
    RETURN_IF_ERROR(Enqueue(cudaMallocHost(&host_buf_, bytes), "cudaMallocHost"));
    capacity_ = bytes;
    return Status::Ok();
  }

  Status Stage(std::span<Tensor* const> tensors, size_t bytes, bool copy_in) {
    RETURN_IF_ERROR(Reserve(std::max<size_t>(bytes, 4)));
    if (!copy_in) return Status::Ok();
    size_t o = 0;
    for (Tensor* t : tensors) {
      std::memcpy(static_cast<std::byte*>(host_buf_) + o, t->raw(), t->bytes());
      o += t->bytes();
    }
    return Enqueue(cudaMemcpyAsync(device_buf_, host_buf_, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  }

  Status Unstage(std::span<Tensor* const> tensors, size_t bytes) {
    RETURN_IF_ERROR(
        Enqueue(cudaMemcpyAsync(host_buf_, device_buf_, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host"));
    RETURN_IF_ERROR(Wait("operation"));
    size_t o = 0;
    for (Tensor* t : tensors) {
      std::memcpy(t->raw(), static_cast<std::byte*>(host_buf_) + o, t->bytes());
      o += t->bytes();
    }
    return Status::Ok();
  }

  // NCCL trusts every member to pass the same counts; a disagreement would
  // hang or corrupt. The control ring checks first, so every member fails
  // with INVALID_ARGUMENT instead.
  Status Agree(const std::string& op, std::span<Tensor* const> tensors, int root) {
    size_t count = 0;
    for (Tensor* t : tensors) count += static_cast<size_t>(t->size());
    const int64_t mine[3] = {static_cast<int64_t>(count), static_cast<int64_t>(HashShapes(tensors) >> 1), root};
    ASSIGN_OR_RETURN(Tensor d, Tensor::FromVector({3}, std::vector<int64_t>(mine, mine + 3)));
    auto all = control_.AllGather(d);
    if (!all.ok()) return Fail(all.status());
    const int64_t* a = all->data<int64_t>();
    for (int r = 0; r < size(); ++r) {
      if (a[3 * r] != mine[0] || a[3 * r + 1] != mine[1] || a[3 * r + 2] != mine[2]) {
        return Fail(InvalidArgument("collective: members disagree on " + op + ": rank " + std::to_string(r) +
                                    " passed " + std::to_string(a[3 * r]) + " elements, rank " +
                                    std::to_string(rank()) + " " + std::to_string(count) + " (" +
                                    ShapesString(tensors) + ")"));
      }
    }
    return Status::Ok();
  }

  Communicator& control_;
  const int device_;
  const Options o_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* device_buf_ = nullptr;
  void* host_buf_ = nullptr;
  size_t capacity_ = 0;
  Status error_;
  bool failed_ = false;
};

Status Available() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return FailedPrecondition(std::string("no GPU is visible (") +
                              (e == cudaSuccess ? "no CUDA devices" : cudaGetErrorString(e)) + ")");
  }
  return LoadNccl();
}

StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(Communicator& control, int device, Options options) {
  RETURN_IF_ERROR(Available());
  if (device < 0) {
    int count = 1;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) count = 1;
    device = control.rank() % count;
  }
  auto c = std::make_unique<NcclCommunicator>(control, device, options);
  RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Communicator>(std::move(c));
}

// One GPU of a process whose GPUs reduce among themselves (MirroredStrategy
// over the GPUs of one process): communicators made together by
// ncclCommInitAll, each driven by its replica's own thread. Device tensors
// only, reduced in place.
class NcclLocalMember final : public Communicator {
 public:
  NcclLocalMember(ncclComm_t comm, int rank, int size, int device, Options o)
      : comm_(comm), rank_(rank), size_(size), device_(device), o_(o) {}
  ~NcclLocalMember() override {
    if (comm_) {
      if (failed_)
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init() {
    RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "cudaSetDevice"));
    return FromCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int64_t generation() const override { return 0; }
  std::string_view implementation() const override { return "nccl"; }
  using Communicator::AllReduce;

  Status AllReduce(std::span<Tensor* const> tensors, ReduceOp op) override {
    RETURN_IF_ERROR(Ready(tensors));
    const ncclRedOp_t red = op == ReduceOp::kMean ? ncclAvg : ncclSum;
    RETURN_IF_ERROR(Nccl(ncclGroupStart(), "ncclGroupStart"));
    for (Tensor* t : tensors) {
      if (t->dtype() != DType::kFloat32) return Fail(InvalidArgument("collective: all_reduce takes float32 tensors"));
      if (t->size() == 0) continue;
      RETURN_IF_ERROR(
          Nccl(ncclAllReduce(t->raw(), t->raw(), static_cast<size_t>(t->size()), ncclFloat, red, comm_, stream_),
               "ncclAllReduce"));
    }
    RETURN_IF_ERROR(Nccl(ncclGroupEnd(), "ncclGroupEnd"));
    return Wait("all_reduce");
  }

  StatusOr<Tensor> AllGather(const Tensor& in) override {
    Tensor copy = in;
    Tensor* p[] = {&copy};
    RETURN_IF_ERROR(Ready(p));
    Shape shape = in.shape();
    if (shape.empty()) shape = {1};
    shape[0] *= size_;
    ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(in.dtype(), shape, in.device()));
    RETURN_IF_ERROR(Nccl(ncclAllGather(in.raw(), out.raw(), in.bytes(), ncclInt8, comm_, stream_), "ncclAllGather"));
    RETURN_IF_ERROR(Wait("all_gather"));
    return out;
  }

  Status Broadcast(std::span<Tensor* const> tensors, int root) override {
    if (root < 0 || root >= size_)
      return Fail(InvalidArgument("collective: broadcast from rank " + std::to_string(root)));
    RETURN_IF_ERROR(Ready(tensors));
    RETURN_IF_ERROR(Nccl(ncclGroupStart(), "ncclGroupStart"));
    for (Tensor* t : tensors) {
      if (t->bytes() == 0) continue;
      RETURN_IF_ERROR(
          Nccl(ncclBroadcast(t->raw(), t->raw(), t->bytes(), ncclInt8, root, comm_, stream_), "ncclBroadcast"));
    }
    RETURN_IF_ERROR(Nccl(ncclGroupEnd(), "ncclGroupEnd"));
    return Wait("broadcast");
  }

  Status Barrier() override {
    ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kFloat32, {1}, Device::Cuda(device_)));
    return AllReduce(t, ReduceOp::kSum);
  }

  void Abort(const Status& reason) override {
    (void)Fail(reason);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  // Every tensor on this member's GPU, and the work that computed them done.
  Status Ready(std::span<Tensor* const> tensors) {
    RETURN_IF_ERROR(error_);
    for (Tensor* t : tensors) {
      if (t->device() != Device::Cuda(device_)) {
        return Fail(InvalidArgument("collective (nccl): tensor " + t->DebugString() +
                                    " is not on this replica's cuda:" + std::to_string(device_)));
      }
    }
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(Device::Cuda(device_)));
    Status s = b->Synchronize(device_);
    return s.ok() ? s : Fail(s);
  }

  Status Nccl(ncclResult_t r, const std::string& what) {
    if (r == ncclSuccess) return Status::Ok();
    return Fail(Status(r == ncclInvalidArgument || r == ncclInvalidUsage ? Code::kInvalidArgument : Code::kUnavailable,
                       "collective (nccl): " + what + ": " + ncclGetErrorString(r)));
  }

  // Waits for the stream within the timeout: a replica that never calls
  // leaves the others' operation pending, which becomes DEADLINE_EXCEEDED.
  Status Wait(const std::string& what) {
    const auto deadline = Clock::now() + o_.timeout;
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return Fail(FromCuda(e, what));
      if (Clock::now() > deadline) {
        return Fail(
            DeadlineExceeded("collective (nccl): " + what + " did not finish within the timeout: a replica is hung"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  Status Fail(const Status& s) {
    if (error_.ok()) error_ = s;
    failed_ = true;
    return error_;
  }

  ncclComm_t comm_;
  const int rank_, size_, device_;
  const Options o_;
  cudaStream_t stream_ = nullptr;
  Status error_;
  bool failed_ = false;
};

StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeLocalGroup(const std::vector<int>& devices, Options options) {
  RETURN_IF_ERROR(Available());
  if (devices.empty()) return InvalidArgument("collective (nccl): no devices");
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data());
  if (r != ncclSuccess) {
    return FailedPrecondition(std::string("collective (nccl): ncclCommInitAll over ") + std::to_string(devices.size()) +
                              " GPUs: " + ncclGetErrorString(r));
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto m = std::make_unique<NcclLocalMember>(comms[i], static_cast<int>(i), static_cast<int>(devices.size()),
                                               devices[i], options);
    RETURN_IF_ERROR(m->Init());
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

void RegisterNccl() {
  static const NcclImplementation kNccl{&Available, &MakeCommunicator, &MakeLocalGroup};
  RegisterNcclImplementation(&kNccl);
}

}  // namespace tfjob::collective
