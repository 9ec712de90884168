// The tfjob-runtime entry points. One binary serves every role: the program
// named on the command line runs on the chief; TF_CONFIG says which role this
// process plays (ps and worker serve until shut down; chief runs the
// program; no TF_CONFIG runs on this machine alone). `local` launches one
// process per task on 127.0.0.1.
//
// Thread-safety: entry points are for main(). Exit codes (the contract the
// operator reads; docs/fault-tolerance.md): 0 only when this task's part of
// training is complete; 143 when SIGTERM/SIGINT stopped it first; 2 for bad
// input, one line "tfjob-runtime: error: ...", before any work; 1 for any
// other failure.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

#include "services/runtime/config.h"
#include "services/programs/program.h"
#include "services/rpc/auth.h"

namespace tfjob::runtime {

// The whole command line (argv[1:]). `programs` are the built-ins plus any a
// custom binary adds.
int RunMain(const std::vector<std::string>& args, const programs::ProgramList& programs, std::ostream& out,
            std::ostream& err);

// Runs `program` in the role the configuration's resolver assigns (TF_CONFIG,
// the Slurm step, or the job's pods; services/cluster/resolver.h), with
// `config` as RunMain read it (config.h). Under Slurm it exports the task's
// CUDA_VISIBLE_DEVICES before any CUDA use.
int RunRole(programs::Program& program, const std::vector<std::string>& args, const programs::ProgramList& all,
            const RuntimeConfig& config, std::ostream& out, std::ostream& err);

// Tells every PS and worker that training is complete, so each exits 0 (best
// effort, short deadlines). `generation` is the chief's: a PS or worker that
// knows a newer chief refuses (0: not checked).
void ShutdownCluster(const std::vector<std::string>& ps, const std::vector<std::string>& workers,
                     const rpc::Credentials& credentials, uint64_t generation = 0);

// How long a task may take to stop after SIGTERM before it exits 143
// regardless: inside Kubernetes' default terminationGracePeriodSeconds (30).
inline constexpr std::chrono::milliseconds kDefaultShutdownGrace{25000};

}  // namespace tfjob::runtime
