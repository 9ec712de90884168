// A mutex, its scoped lock and a condition variable that clang's thread-safety
// analysis (-Wthread-safety) can check, with the annotations that say which
// mutex guards which member. libstdc++'s std::mutex carries no capability
// attributes, so the analysis cannot see it; these thin wrappers add them and
// nothing else (same size, same cost, std::mutex underneath).
//
// Usage:
//   mutable Mutex mu_;
//   int count_ TFJOB_GUARDED_BY(mu_) = 0;
//   void Add() TFJOB_EXCLUDES(mu_) { MutexLock l(mu_); ++count_; }
//   while (count_ == 0) cv_.Wait(l);             // loops keep the analysis exact
//   cv_.Wait(l, [&]() TFJOB_REQUIRES(mu_) { return count_ > 0; });
//
// Under GCC the annotations expand to nothing; scripts/thread-safety.sh runs
// clang's analysis over every production source in CI.
//
// Ownership: Mutex owns its std::mutex; MutexLock borrows a Mutex for its
// scope. Thread-safety: as std::mutex / std::unique_lock /
// std::condition_variable. Failure: none (std::system_error from the
// standard library is a programmer error here and terminates).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__clang__)
#define TFJOB_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TFJOB_THREAD_ANNOTATION(x)
#endif

#define TFJOB_CAPABILITY(x) TFJOB_THREAD_ANNOTATION(capability(x))
#define TFJOB_SCOPED_CAPABILITY TFJOB_THREAD_ANNOTATION(scoped_lockable)
#define TFJOB_GUARDED_BY(x) TFJOB_THREAD_ANNOTATION(guarded_by(x))
#define TFJOB_PT_GUARDED_BY(x) TFJOB_THREAD_ANNOTATION(pt_guarded_by(x))
#define TFJOB_ACQUIRED_AFTER(...) TFJOB_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define TFJOB_ACQUIRED_BEFORE(...) TFJOB_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define TFJOB_REQUIRES(...) TFJOB_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TFJOB_REQUIRES_SHARED(...) TFJOB_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define TFJOB_ACQUIRE(...) TFJOB_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TFJOB_ACQUIRE_SHARED(...) TFJOB_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define TFJOB_RELEASE_SHARED(...) TFJOB_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TFJOB_RELEASE_GENERIC(...) TFJOB_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TFJOB_RELEASE(...) TFJOB_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TFJOB_TRY_ACQUIRE(...) TFJOB_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TFJOB_EXCLUDES(...) TFJOB_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TFJOB_RETURN_CAPABILITY(x) TFJOB_THREAD_ANNOTATION(lock_returned(x))
#define TFJOB_NO_THREAD_SAFETY_ANALYSIS TFJOB_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tfjob {

class TFJOB_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() TFJOB_ACQUIRE() { mu_.lock(); }
  void Unlock() TFJOB_RELEASE() { mu_.unlock(); }
  bool TryLock() TFJOB_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // For the analysis only: tells it the caller holds this mutex where it
  // cannot see the lock being taken (a callback run under it).
  void AssertHeld() const TFJOB_THREAD_ANNOTATION(assert_capability(this)) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// std::unique_lock for a Mutex: locked for its scope, and Unlock()/Lock() in
// between where a function must drop the mutex around a slow call.
class TFJOB_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TFJOB_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() TFJOB_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() TFJOB_RELEASE() { lock_.unlock(); }
  void Lock() TFJOB_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// std::condition_variable over a MutexLock. The predicate forms run the
// predicate with the mutex held; annotate the lambda TFJOB_REQUIRES(mu) so
// the analysis checks its body.
class CondVar {
 public:
  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

  void Wait(MutexLock& l) { cv_.wait(l.lock_); }
  template <class Pred>
  void Wait(MutexLock& l, Pred pred) TFJOB_NO_THREAD_SAFETY_ANALYSIS {
    cv_.wait(l.lock_, std::move(pred));
  }
  // False on timeout, as std::cv_status::timeout.
  template <class Clock, class Duration>
  bool WaitUntil(MutexLock& l, const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv_.wait_until(l.lock_, deadline) == std::cv_status::no_timeout;
  }
  // The predicate's value at return, as std::condition_variable's.
  template <class Clock, class Duration, class Pred>
  bool WaitUntil(MutexLock& l, const std::chrono::time_point<Clock, Duration>& deadline,
                 Pred pred) TFJOB_NO_THREAD_SAFETY_ANALYSIS {
    return cv_.wait_until(l.lock_, deadline, std::move(pred));
  }
  template <class Rep, class Period>
  bool WaitFor(MutexLock& l, const std::chrono::duration<Rep, Period>& timeout) {
    return cv_.wait_for(l.lock_, timeout) == std::cv_status::no_timeout;
  }
  template <class Rep, class Period, class Pred>
  bool WaitFor(MutexLock& l, const std::chrono::duration<Rep, Period>& timeout,
               Pred pred) TFJOB_NO_THREAD_SAFETY_ANALYSIS {
    return cv_.wait_for(l.lock_, timeout, std::move(pred));
  }

 private:
  std::condition_variable cv_;
};

// A reader-writer mutex (std::shared_mutex) the analysis can see. The
// lower-case members make it a SharedMutex for the scoped locks below and
// for the standard library.
class TFJOB_CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() TFJOB_ACQUIRE() { mu_.lock(); }
  void unlock() TFJOB_RELEASE() { mu_.unlock(); }
  void lock_shared() TFJOB_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() TFJOB_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Exclusive ownership of any annotated reader-writer mutex for a scope.
template <class M>
class TFJOB_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(M& mu) TFJOB_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() TFJOB_RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  M& mu_;
};

// Shared ownership for a scope, or until Unlock().
template <class M>
class TFJOB_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(M& mu) TFJOB_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() TFJOB_RELEASE_GENERIC() {
    if (held_) mu_.unlock_shared();
  }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

  void Unlock() TFJOB_RELEASE_GENERIC() {
    mu_.unlock_shared();
    held_ = false;
  }

 private:
  M& mu_;
  bool held_ = true;
};

}  // namespace tfjob
