#include "services/collective/local.h"

#include <algorithm>
#include <cstring>

namespace tfjob::collective {

class LocalGroup::Member final : public Communicator {
 public:
  Member(LocalGroup& g, int rank) : g_(g), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return g_.size_; }
  int64_t generation() const override { return 0; }
  std::string_view implementation() const override { return "local"; }

  Status AllReduce(std::span<Tensor* const> tensors, ReduceOp op) override {
    for (Tensor* t : tensors) {
      if (t->dtype() != DType::kFloat32) {
        Status s = InvalidArgument("collective: all_reduce takes float32 tensors, got " + t->DebugString());
        g_.Abort(s);
        return s;
      }
    }
    RETURN_IF_ERROR(Enter({"all_reduce", {tensors.begin(), tensors.end()}, -1, nullptr}));
    const int n = size();
    std::vector<float> sum;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const int64_t count = tensors[k]->size();
      const int64_t begin = count * rank_ / n, end = count * (rank_ + 1) / n;
      if (begin == end) continue;
      auto slice = [&](int r) { return g_.calls_[static_cast<size_t>(r)].tensors[k]->data<float>() + begin; };
      // Added up in rank order, whichever replica does it.
      sum.assign(slice(0), slice(0) + (end - begin));
      for (int r = 1; r < n; ++r) {
        const float* src = slice(r);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += src[i];
      }
      if (op == ReduceOp::kMean) {
        for (float& v : sum) v /= static_cast<float>(n);
      }
      for (int r = 0; r < n; ++r) std::memcpy(slice(r), sum.data(), sum.size() * sizeof(float));
    }
    return g_.Arrive(rank_);
  }

  StatusOr<Tensor> AllGather(const Tensor& in) override {
    Shape shape = in.shape();
    if (shape.empty()) shape = {1};
    shape[0] *= size();
    ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(in.dtype(), shape));
    RETURN_IF_ERROR(Enter({"all_gather", {}, -1, &in}));
    for (int r = 0; r < size(); ++r) {
      const Tensor& src = *g_.calls_[static_cast<size_t>(r)].in;
      if (src.bytes() > 0) std::memcpy(out.raw() + static_cast<size_t>(r) * src.bytes(), src.raw(), src.bytes());
    }
    RETURN_IF_ERROR(g_.Arrive(rank_));
    return out;
  }

  Status Broadcast(std::span<Tensor* const> tensors, int root) override {
    if (root < 0 || root >= size()) {
      Status s = InvalidArgument("collective: broadcast from rank " + std::to_string(root) + " in a group of " +
                                 std::to_string(size()));
      g_.Abort(s);
      return s;
    }
    RETURN_IF_ERROR(Enter({"broadcast", {tensors.begin(), tensors.end()}, root, nullptr}));
    if (rank_ != root) {
      for (size_t k = 0; k < tensors.size(); ++k) {
        const Tensor* src = g_.calls_[static_cast<size_t>(root)].tensors[k];
        if (src->bytes() > 0) std::memcpy(tensors[k]->raw(), src->raw(), src->bytes());
      }
    }
    return g_.Arrive(rank_);
  }

  Status Barrier() override {
    RETURN_IF_ERROR(Enter({"barrier", {}, -1, nullptr}));
    return g_.Arrive(rank_);
  }

  void Abort(const Status& reason) override { g_.Abort(reason); }

 private:
  // Publishes this replica's call, waits for the others, checks agreement.
  Status Enter(Call call) {
    g_.calls_[static_cast<size_t>(rank_)] = std::move(call);
    // A disagreement fails every replica, and the group stays failed.
    return g_.Arrive(rank_, /*agree=*/true);
  }

  LocalGroup& g_;
  const int rank_;
};

LocalGroup::LocalGroup(int size, Options options)
    : size_(std::max(1, size)),
      options_(options),
      calls_(static_cast<size_t>(size_)),
      here_(static_cast<size_t>(size_)) {
  for (int r = 0; r < size_; ++r) members_.push_back(std::make_unique<Member>(*this, r));
}

LocalGroup::~LocalGroup() = default;

Communicator* LocalGroup::member(int rank) { return members_.at(static_cast<size_t>(rank)).get(); }

void LocalGroup::Abort(const Status& reason) {
  MutexLock l(mu_);
  if (error_.ok()) error_ = reason;
  cv_.NotifyAll();
}

Status LocalGroup::Arrive(int rank, bool agree) {
  MutexLock l(mu_);
  if (!error_.ok()) return error_;
  const uint64_t phase = phase_;
  here_[static_cast<size_t>(rank)] = true;
  if (++arrived_ == size_) {
    arrived_ = 0;
    std::fill(here_.begin(), here_.end(), false);
    if (agree) {
      if (Status s = Agree(); !s.ok()) error_ = s;
    }
    ++phase_;
    cv_.NotifyAll();
    return error_;
  }
  const bool done =
      cv_.WaitFor(l, options_.timeout, [&]() TFJOB_REQUIRES(mu_) { return phase_ != phase || !error_.ok(); });
  if (phase_ != phase) return error_;
  if (!error_.ok()) return error_;
  if (!done) {
    std::string missing;
    for (int r = 0; r < size_; ++r) {
      if (!here_[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    error_ = DeadlineExceeded("collective: replica " + missing + " did not reach the operation within " +
                              std::to_string(options_.timeout.count() / 1000.0).substr(0, 5) + " s");
    cv_.NotifyAll();
  }
  return error_;
}

Status LocalGroup::Agree() const {
  const Call& first = calls_[0];
  auto shapes = [](const Call& c) {
    if (c.in) {
      Tensor* p[] = {const_cast<Tensor*>(c.in)};
      return ShapesString(p);
    }
    return ShapesString(c.tensors);
  };
  // Any disagreement anywhere fails every replica, not only the one that
  // differs from replica 0.
  std::string why;
  for (int r = 1; r < size_ && why.empty(); ++r) {
    const Call& c = calls_[static_cast<size_t>(r)];
    bool ok = c.op == first.op && c.root == first.root && c.tensors.size() == first.tensors.size() &&
              (c.in == nullptr) == (first.in == nullptr);
    for (size_t k = 0; ok && k < c.tensors.size(); ++k) {
      ok = c.tensors[k]->dtype() == first.tensors[k]->dtype() && c.tensors[k]->shape() == first.tensors[k]->shape();
    }
    if (ok && c.in) ok = c.in->dtype() == first.in->dtype() && c.in->shape() == first.in->shape();
    if (!ok) {
      why = "collective: replicas disagree on an operation: replica 0 called " + first.op + " (" + shapes(first) +
            ") but replica " + std::to_string(r) + " called " + c.op + " (" + shapes(c) + ")";
    }
  }
  return why.empty() ? Status::Ok() : InvalidArgument(why);
}

}  // namespace tfjob::collective
