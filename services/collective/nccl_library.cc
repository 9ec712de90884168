// The NCCL functions this build calls, forwarding to libnccl opened on first
// use (nccl_library.h). Each keeps NCCL's own declaration (from nccl.h), so
// nccl_cuda.cc is unchanged; a function added there must be added here, or
// the link fails naming it.
#include "services/collective/nccl_library.h"

#include <nccl.h>

#include "common/shared_library.h"

#define TFJOB_STR2(x) #x
#define TFJOB_STR(x) TFJOB_STR2(x)

namespace tfjob::collective {

// Used by the forwarders below, outside the namespace.
SharedLibrary& NcclLibrary() {
  static SharedLibrary library("NCCL", {"libnccl.so." TFJOB_STR(NCCL_MAJOR)}, TFJOB_NCCL_LIBRARY_DIR);
  return library;
}

namespace {

constexpr const char* kFunctions[] = {
    "ncclGetVersion", "ncclGetUniqueId",    "ncclCommInitRankConfig", "ncclCommInitAll",       "ncclCommDestroy",
    "ncclCommAbort",  "ncclGetErrorString", "ncclGetLastError",       "ncclCommGetAsyncError", "ncclAllReduce",
    "ncclBroadcast",  "ncclAllGather",      "ncclGroupStart",         "ncclGroupEnd"};

}  // namespace

Status LoadNccl() {
  for (const char* f : kFunctions) RETURN_IF_ERROR(NcclLibrary().SymbolStatus(f));
  return Status::Ok();
}

}  // namespace tfjob::collective

// NCCL's `name`, forwarded.
#define TFJOB_NCCL_FORWARD(ret, name, params, args, fallback) \
  TFJOB_FORWARD_TO_LIBRARY(tfjob::collective::NcclLibrary(), ret, name, params, args, fallback)

extern "C" {

TFJOB_NCCL_FORWARD(ncclResult_t, ncclGetVersion, (int* version), (version), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclCommInitRankConfig,
                   (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config),
                   (comm, nranks, id, rank, config), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist),
                   (comm, ndev, devlist), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm), ncclSystemError)
TFJOB_NCCL_FORWARD(const char*, ncclGetErrorString, (ncclResult_t result), (result), "NCCL is not loaded")
TFJOB_NCCL_FORWARD(const char*, ncclGetLastError, (ncclComm_t comm), (comm), "NCCL is not loaded")
TFJOB_NCCL_FORWARD(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error), (comm, error),
                   ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclAllReduce,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, recv, count, type, op, comm, stream), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclBroadcast,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, recv, count, type, root, comm, stream), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclAllGather,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, recv, count, type, comm, stream), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclGroupStart, (), (), ncclSystemError)
TFJOB_NCCL_FORWARD(ncclResult_t, ncclGroupEnd, (), (), ncclSystemError)

}  // extern "C"
