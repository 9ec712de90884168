// Runs a program to completion for tests, capturing stdout and stderr.
// Thread-safety: reentrant. Failure: a program that cannot be started yields
// exit_code 127 and the reason in err.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tfjob::testing {

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string out;
  std::string err;
};

// `inherit`: descriptors of this process the program gets at the same
// numbers (they are close-on-exec here).
RunResult Run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              const std::string& cwd = "", const std::vector<int>& inherit = {});

// The source tree and build/bin: $TFJOB_SOURCE_DIR / $TFJOB_BIN_DIR when set,
// else the paths of the build that compiled the tests.
std::string SourceDir();
std::string BinDir();
std::string MnistDir();       // SourceDir()/../shared/data/mnist
std::string RuntimeBinary();  // BinDir()/tfjob-runtime
// A JSON file's contents: discarded (is_discarded()) when the file is
// missing or not JSON, so a test fails at its check, never by a throw.
nlohmann::json ReadJsonFile(const std::string& path);
// A file's bytes ("" when it cannot be read), and a file written with
// `text` (binary: no newline translation).
std::string ReadText(const std::string& path);
void WriteText(const std::string& path, const std::string& text);
// A fresh empty directory under the test temp dir ($TEST_TMPDIR or /tmp),
// removed with everything in it when the test process exits (kept when
// TFJOB_KEEP_TEST_TMP=1).
std::string MakeTempDir(const std::string& name);
// `path` (a file or a directory) is removed when the test process exits, as
// MakeTempDir's directories are.
void RemoveAtExit(const std::string& path);

}  // namespace tfjob::testing
