// `tfjob-runtime local [--ps N] --workers M [--host H] [--] PROGRAM [flags]`:
// one process per task on 127.0.0.1 (or H; this same binary), each with its
// TF_CONFIG, output prefixed by the task name. The launcher binds every
// task's listening socket on port 0 first, so TF_CONFIG names ports the
// kernel gave out, and each task inherits its socket (services/base/ports.h)
// instead of binding a number that another process could take first. With --ps N > 0 the cluster is a chief,
// N parameter servers and M workers (parameter-server training); with the
// default --ps 0 it is M workers that train together (multi-worker
// mirrored), worker 0 leading. Returns the lead task's (chief:0 or
// worker:0) exit code; the others finish with it or are shut down, and any
// still running after a grace period are terminated, so nothing is left
// behind.
// Every task gets the run's task token; with --tls also a CA and
// certificate made for the run (TFJOB_TLS_DIR, removed when the run ends),
// so every connection between the tasks is mutual TLS.
// SIGTERM or SIGINT to the launcher is passed on to every task (each stops
// cleanly: the chief checkpoints, everyone exits 143); the tasks die with
// the launcher even when it is SIGKILLed.
// Failure: bad flags exit 2; a chief killed by a signal returns 128 + signal.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "services/programs/program.h"

namespace tfjob::runtime {

// `self_exe`: what to start for each task; "" for this executable
// (/proc/self/exe). ProcessSettings::self_exe says when it is not.
int RunLocal(const std::vector<std::string>& args, const programs::ProgramList& programs, const std::string& self_exe,
             std::ostream& out, std::ostream& err);

}  // namespace tfjob::runtime
