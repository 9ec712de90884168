// Prefetch: the one iterator with a thread of its own. A background thread
// pulls from the upstream iterator into a bounded buffer that Next() drains.
#include <deque>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "services/data/dataset_node.h"

namespace tfjob::data::internal {
namespace {

// ------------------------------------------------------------------- Prefetch

class PrefetchNode final : public DatasetImpl {
 public:
  PrefetchNode(NodePtr input, int64_t buffer_size) : input_(std::move(input)), buffer_size_(buffer_size) {}

  static StatusOr<NodePtr> Make(NodePtr input, int64_t buffer_size) {
    if (buffer_size < 1) return InvalidArgument("prefetch: buffer_size " + Str(buffer_size) + " must be >= 1");
    return NodePtr(std::make_shared<PrefetchNode>(std::move(input), buffer_size));
  }

  StatusOr<std::unique_ptr<Iterator>> MakeIterator() const override;
  int64_t Cardinality() const override { return input_->Cardinality(); }

 private:
  NodePtr input_;
  int64_t buffer_size_;
};

class PrefetchIterator final : public Iterator {
 public:
  PrefetchIterator(std::unique_ptr<Iterator> input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(static_cast<size_t>(buffer_size)) {}

  ~PrefetchIterator() override {
    {
      MutexLock lock(mu_);
      cancelled_ = true;
    }
    space_.NotifyAll();
    if (worker_.joinable()) worker_.join();
  }

  // Separate from the constructor so a failure to create the thread is a
  // Status rather than an exception.
  Status Start() {
    try {
      worker_ = std::thread([this] { Produce(); });
    } catch (const std::system_error& ex) {
      return ResourceExhausted(std::string("prefetch: cannot start the background thread: ") + ex.what());
    }
    return Status::Ok();
  }

  NextResult Next() override {
    MutexLock lock(mu_);
    if (finished_) return std::nullopt;
    ready_.Wait(lock, [this]() TFJOB_REQUIRES(mu_) { return !buffer_.empty(); });
    NextResult r = std::move(buffer_.front());
    buffer_.pop_front();
    lock.Unlock();
    space_.NotifyOne();
    if (r.ok() && !r->has_value()) {
      lock.Lock();
      finished_ = true;
    }
    return r;
  }

 private:
  void Produce() {
    while (true) {
      {
        MutexLock lock(mu_);
        space_.Wait(lock, [this]() TFJOB_REQUIRES(mu_) { return cancelled_ || buffer_.size() < buffer_size_; });
        if (cancelled_) return;
      }
      // Upstream runs without the lock so the consumer can drain the buffer
      // meanwhile; only this thread touches input_.
      NextResult r = input_->Next();
      bool end = r.ok() && !r->has_value();
      {
        MutexLock lock(mu_);
        if (cancelled_) return;
        buffer_.push_back(std::move(r));
      }
      ready_.NotifyOne();
      if (end) return;
    }
  }

  std::unique_ptr<Iterator> input_;
  const size_t buffer_size_;
  Mutex mu_;
  CondVar ready_;  // buffer became non-empty
  CondVar space_;  // buffer has room, or cancelled
  std::deque<NextResult> buffer_ TFJOB_GUARDED_BY(mu_);
  bool cancelled_ TFJOB_GUARDED_BY(mu_) = false;
  bool finished_ TFJOB_GUARDED_BY(mu_) = false;  // end of sequence was delivered
  std::thread worker_;                           // last: started after every other member exists
};

StatusOr<std::unique_ptr<Iterator>> PrefetchNode::MakeIterator() const {
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> in, input_->MakeIterator());
  auto it = std::make_unique<PrefetchIterator>(std::move(in), buffer_size_);
  RETURN_IF_ERROR(it->Start());
  return std::unique_ptr<Iterator>(std::move(it));
}

}  // namespace

StatusOr<NodePtr> MakePrefetchNode(NodePtr input, int64_t buffer_size) {
  return PrefetchNode::Make(std::move(input), buffer_size);
}

}  // namespace tfjob::data::internal
