// The coordinator's dispatch: one thread per worker sends its closures and
// takes their answers (coordinator.h).
#include <algorithm>

#include "common/mutex.h"
#include "services/coordinator/coordinator.h"
#include "services/rpc/rpc.h"

namespace tfjob::coordinator {
namespace {

// Codes that mean "the worker (or the path to it) failed", not the closure.
bool IsWorkerFailure(grpc::StatusCode c) {
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::DEADLINE_EXCEEDED ||
         c == grpc::StatusCode::CANCELLED || c == grpc::StatusCode::UNKNOWN || c == grpc::StatusCode::ABORTED;
}

}  // namespace

struct ClusterCoordinator::Call {
  // The channel the call runs on outlives it (declared first: destroyed last).
  std::shared_ptr<proto::Worker::Stub> stub;
  std::shared_ptr<Closure> closure;
  std::unique_ptr<grpc::ClientContext> ctx;
  proto::RunClosureResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<proto::RunClosureResponse>> reader;
  std::chrono::steady_clock::time_point sent;
};

void ClusterCoordinator::Loop(Worker& w) {
  const int running = std::max(1, options_.inflight_per_worker);
  int outstanding = 0;  // calls sent whose answers have not come
  // The newest call sent while it is unanswered (0: none): the next one
  // goes queued behind it (RunClosureRequest.queued_behind).
  uint64_t last_sent = 0;
  auto send = [&](std::shared_ptr<Closure> c) {
    const uint64_t id = c->request.closure_id();
    c->request.set_queued_behind(outstanding > 0 ? last_sent : 0);
    if (!Send(w, std::move(c))) return;
    ++outstanding;
    last_sent = id;
  };
  auto take = [&](void* tag) {
    if (tag == &w) {  // a kick: a closure was queued
      MutexLock g(w.call_mu);
      w.kick.reset();
      return;
    }
    --outstanding;
    if (static_cast<Call*>(tag)->closure->request.closure_id() == last_sent) last_sent = 0;
    Answered(w, std::unique_ptr<Call>(static_cast<Call*>(tag)));
    EndCall(w);
  };
  while (!stopping_) {
    if (outstanding > 0) {
      // Send what there is room for, then wait for an answer, or for a
      // closure queued while a running one's room is free.
      bool ahead = false;
      while (MarkedHealthy(w) && StartCall(w, &ahead)) {
        std::shared_ptr<Closure> c = Pop(/*wait=*/false);
        if (!c) {
          EndCall(w);
          break;
        }
        if (ahead) {
          MutexLock g(mu_);
          ++stats_.sent_ahead;
        }
        send(std::move(c));
      }
      bool room = MarkedHealthy(w);
      {
        MutexLock g(w.call_mu);
        room = room && w.calls < running;
        w.waiting_with_room = room;
      }
      if (room) {
        // Queued after the look above and before the flag: Kick missed it.
        bool queued = false;
        {
          MutexLock g(mu_);
          queued = !queue_.empty();
        }
        if (queued) {
          MutexLock g(w.call_mu);
          w.waiting_with_room = false;
          continue;
        }
      }
      void* tag = nullptr;
      bool ok = false;
      // The slice only bounds how long a stop or a missed wake-up could go
      // unseen; answers and kicks end the wait at once.
      const auto got = w.cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      {
        MutexLock g(w.call_mu);
        w.waiting_with_room = false;
      }
      if (got == grpc::CompletionQueue::GOT_EVENT) take(tag);
      continue;
    }
    if (!MarkedHealthy(w)) {
      if (no_more_work_) {
        // Nothing will be scheduled again: idle until the coordinator goes.
        MutexLock lock(mu_);
        queue_cv_.Wait(lock, [&] { return stopping_.load(); });
        break;
      }
      Reconnect(w);
      continue;
    }
    std::shared_ptr<Closure> c = Pop(/*wait=*/true);
    if (!c) break;
    // Lost while this thread waited for work: the closure goes back to the
    // front for a healthy worker, no attempt spent, rather than to a dead
    // address.
    bool ahead = false;  // never, with nothing in flight
    if (!MarkedHealthy(w) || !StartCall(w, &ahead)) {
      PutBack(std::move(c));
      continue;
    }
    send(std::move(c));
  }
  // Stopping: the calls in flight still end, as they did when each had a
  // thread of its own for the destructor to join.
  void* tag = nullptr;
  bool ok = false;
  while (outstanding > 0 && w.cq.Next(&tag, &ok)) take(tag);
  // A kick not taken yet is cancelled, and its alarm destroyed only once its
  // tag has come out of the queue: gRPC 1.51's Alarm (Debian's) takes the
  // reference the queue's event holds only when its timer fires, so an
  // alarm destroyed between the firing and that moment is freed under the
  // timer thread, which then posts it to the queue (Next crashed on it).
  {
    MutexLock g(w.call_mu);
    if (w.kick) w.kick->Cancel();
  }
  w.cq.Shutdown();
  while (w.cq.Next(&tag, &ok)) {
  }
  MutexLock g(w.call_mu);
  w.kick.reset();
}

void ClusterCoordinator::Kick() {
  for (auto& w : workers_) {
    MutexLock g(w->call_mu);
    if (!w->waiting_with_room || w->kick) continue;
    w->kick = std::make_unique<grpc::Alarm>();
    w->kick->Set(&w->cq, std::chrono::system_clock::now(), w.get());
  }
}

bool ClusterCoordinator::StartCall(Worker& w, bool* ahead) {
  const int running = std::max(1, options_.inflight_per_worker);
  const int most = running + std::max(0, options_.queued_per_worker);
  *ahead = false;
  {
    MutexLock g(w.call_mu);
    if (w.calls < running) {
      ++w.calls;
      return true;
    }
    // A closure sent ahead waits on the worker, and its deadline counts the
    // wait: only while the calls are short next to the deadline.
    if (w.calls >= most || 4 * w.last_call > options_.rpc_timeout) return false;
  }
  // Nor while another worker could start it now (one not connected yet
  // counts as such, and gets it once it is).
  for (auto& other : workers_) {
    if (other.get() == &w) continue;
    MutexLock g(other->call_mu);
    if (other->calls < running) return false;
  }
  MutexLock g(w.call_mu);
  if (w.calls >= most) return false;
  ++w.calls;
  *ahead = true;
  return true;
}

void ClusterCoordinator::EndCall(Worker& w) {
  MutexLock g(w.call_mu);
  --w.calls;
}

bool ClusterCoordinator::Send(Worker& w, std::shared_ptr<Closure> c) {
  auto call = std::make_unique<Call>();
  call->ctx = rpc::Context(options_.rpc_timeout, options_.credentials);
  std::optional<Status> aborted;
  {
    MutexLock g(mu_);
    aborted = aborted_;
    if (!aborted) in_flight_.insert(call->ctx.get());
  }
  if (aborted) {
    Finish(c, *aborted, {});
    EndCall(w);
    return false;
  }
  call->sent = std::chrono::steady_clock::now();
  call->stub = w.stub->Get();
  call->reader = call->stub->AsyncRunClosure(call->ctx.get(), c->request, &w.cq);
  call->closure = std::move(c);
  Call* tag = call.release();  // back in Loop's `take` when its answer comes
  tag->reader->Finish(&tag->resp, &tag->status, tag);
  return true;
}

void ClusterCoordinator::Answered(Worker& w, std::unique_ptr<Call> call) {
  std::shared_ptr<Closure> c = std::move(call->closure);
  const grpc::Status& st = call->status;
  {
    // Before the closure is finished: whoever waits on it sees the calls
    // it decides on (StartCall) already knowing this one's time.
    MutexLock g(w.call_mu);
    w.last_call = std::chrono::steady_clock::now() - call->sent;
  }
  std::optional<Status> aborted;
  {
    MutexLock g(mu_);
    in_flight_.erase(call->ctx.get());
    aborted = aborted_;
  }
  if (options_.metrics) {
    options_.metrics->RecordClosure(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - call->sent).count());
  }
  if (!st.ok() && aborted) {
    Finish(c, *aborted, {});
    return;
  }
  if (!st.ok() && IsWorkerFailure(st.error_code())) {
    OnCallFailed(w, std::move(c), st);
    return;
  }
  if (st.ok() && NoteRestart(w, call->resp) && call->resp.error_code() != 0) {
    Requeue(std::move(c));
    return;
  }
  Complete(w, c, st, call->resp);
}

void ClusterCoordinator::OnCallFailed(Worker& w, std::shared_ptr<Closure> c, const grpc::Status& st) {
  const Status why = rpc::FromGrpc(st, "closure " + c->request.function() + " on worker " + w.address);
  // A call past its deadline from a worker that still answers, as the
  // same process, is a slow closure, not a lost worker.
  const bool worker_lost = st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED || !Healthy(w);
  if (worker_lost) {
    MutexLock g(w.mu);
    if (w.healthy) {
      w.healthy = false;
      MutexLock g2(mu_);  // the order: a worker's mu, then mu_
      ++stats_.worker_failures;
      if (options_.metrics) options_.metrics->RecordWorkerFailure();
    }
  }
  if (++c->attempts >= options_.max_attempts) {
    const Status err(why.code(), why.message() + " (failed " + std::to_string(c->attempts) +
                                     " attempts; the limit is " + std::to_string(options_.max_attempts) + ")");
    FailJob(c, err);
    return;
  }
  Requeue(std::move(c));
}

}  // namespace tfjob::coordinator
