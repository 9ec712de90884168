// `tfjob-runtime local [--ps N] --workers M [--] PROGRAM [flags]`: one
// process per task on 127.0.0.1 (this same binary), each with its TF_CONFIG,
// output prefixed by the task name. With --ps N > 0 the cluster is a chief,
// N parameter servers and M workers (parameter-server training); with the
// default --ps 0 it is M workers that train together (multi-worker
// mirrored), worker 0 leading. Returns the lead task's (chief:0 or
// worker:0) exit code; the others finish with it or are shut down, and any
// still running after a grace period are terminated, so nothing is left
// behind.
// Failure: bad flags exit 2; a chief killed by a signal returns 128 + signal.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "services/programs/program.h"

namespace tfjob::runtime {

int RunLocal(const std::vector<std::string>& args, const programs::ProgramList& programs, std::ostream& out,
             std::ostream& err);

// A free TCP port on 127.0.0.1 (bound and released; the caller races nobody
// on a test machine in practice).
StatusOr<int> FreePort();

}  // namespace tfjob::runtime
