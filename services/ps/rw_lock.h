// A reader-writer lock that prefers writers: once an update waits, new
// readers wait behind it. A PS shard is read (pulled, saved) far more often
// than written, and with glibc's default (reader-preferring) rwlock a steady
// stream of overlapping pulls could starve pushes forever.
//
// Satisfies the SharedMutex requirements, so WriterLock and ReaderLock
// (common/mutex.h) work, and carries clang's capability annotations. Thread-safety: that is its purpose. Not recursive.
#pragma once

#include <pthread.h>

#include "common/mutex.h"

namespace tfjob::ps {

class TFJOB_CAPABILITY("mutex") RwLock {
 public:
  RwLock() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~RwLock() { pthread_rwlock_destroy(&lock_); }
  RwLock(const RwLock&) = delete;
  RwLock& operator=(const RwLock&) = delete;

  void lock() TFJOB_ACQUIRE() { pthread_rwlock_wrlock(&lock_); }
  bool try_lock() TFJOB_TRY_ACQUIRE(true) { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() TFJOB_RELEASE() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() TFJOB_ACQUIRE_SHARED() { pthread_rwlock_rdlock(&lock_); }
  bool try_lock_shared() TFJOB_THREAD_ANNOTATION(try_acquire_shared_capability(true)) {
    return pthread_rwlock_tryrdlock(&lock_) == 0;
  }
  void unlock_shared() TFJOB_RELEASE_SHARED() { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

}  // namespace tfjob::ps
