// A directory of numbered checkpoints, in the spirit of TensorFlow's
// CheckpointManager, for state spread over several parameter servers:
//
//   DIR/ckpt-<step>/ps-<i>.ckpt   one file per PS, written by that PS (Save RPC)
//   DIR/ckpt-<step>/meta.json     written last, atomically, by the chief
//
// meta.json is the commit: a checkpoint without it, or whose meta or files
// fail verification, does not exist for readers. The meta holds the program's
// own state (step, epoch history...) and the size and Adler-32 of every file,
// and ends with a CRC-32 of itself, so a truncated, bit-flipped or mixed-up
// checkpoint is skipped (with a logged reason) and the previous good one is
// used. Each file is also checked through checkpoint::Check (every chunk's
// CRC and the structure), streamed, so committing or verifying a checkpoint
// of any size costs one chunk of memory.
//
// Ownership: plain value over a directory. Thread-safety: one writer (the
// chief) per directory; readers (a restarted chief, the evaluator) may run
// concurrently with it because commits are atomic renames. Failure: I/O
// errors are Status values naming the path; nothing here deletes a committed
// checkpoint except the retention policy, which never removes the newest.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tfjob::checkpoint {

struct Committed {
  int64_t step = 0;
  bool final = false;
  std::string dir;                 // DIR/ckpt-<step>
  std::vector<std::string> files;  // full paths, in commit order
  nlohmann::json state;            // the program's own JSON
};

// INVALID_ARGUMENT naming `dir` when this process cannot create files in
// it (made first if missing): checked at start, before any training, so a
// read-only or mistyped --checkpoint-dir is not found at the first save.
Status CheckWritable(const std::string& dir);

class Manager {
 public:
  // Keeps the newest `keep` committed checkpoints (at least 1). With
  // `ignore_damaged` false, Latest() fails when every committed checkpoint
  // is damaged instead of reporting none (training would silently start
  // over from step 0).
  Manager(std::string dir, int keep = 3, bool ignore_damaged = false);

  const std::string& dir() const { return dir_; }
  // Creates DIR/ckpt-<step>, clearing what an interrupted attempt left there.
  StatusOr<std::string> Prepare(int64_t step) const;
  // Commits DIR/ckpt-<step> holding `files` (names inside it), then applies
  // the retention policy.
  Status Commit(int64_t step, bool final, const nlohmann::json& state, const std::vector<std::string>& files) const;
  // The newest checkpoint that verifies; nullopt when there is none. Skipped
  // ones are reported on `log` (one line each) when it is given. When there
  // are committed checkpoints and every one is damaged: DATA_LOSS naming
  // them, unless the manager ignores damage.
  StatusOr<std::optional<Committed>> Latest(std::ostream* log = nullptr) const;
  // The step of the newest committed checkpoint, unverified: a directory
  // listing, cheap enough to poll before paying for Latest().
  std::optional<int64_t> NewestCommittedStep() const;
  // Verifies one checkpoint directory.
  StatusOr<Committed> Verify(const std::string& ckpt_dir) const;

 private:
  std::vector<std::pair<int64_t, std::string>> List() const;  // newest first

  std::string dir_;
  int keep_;
  bool ignore_damaged_;
};

}  // namespace tfjob::checkpoint
