#include "services/tensor/threads.h"

#include <Eigen/Core>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace tfjob {

void SetComputeThreads(int n) {
  if (n < 1) n = 1;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

int ComputeThreads() { return Eigen::nbThreads(); }

void UseComputeThreadsHere() {
#ifdef _OPENMP
  const int threads = ComputeThreads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
#endif
}

}  // namespace tfjob
