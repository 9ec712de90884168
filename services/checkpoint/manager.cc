#include "services/checkpoint/manager.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <system_error>

#include "common/files.h"
#include "services/checkpoint/checkpoint.h"

namespace tfjob::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMeta = "meta.json";
constexpr const char* kPrefix = "ckpt-";
constexpr const char* kTrailer = "#crc32 ";

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::optional<int64_t> StepOf(const std::string& name) {
  const std::string p = kPrefix;
  if (name.size() <= p.size() || name.compare(0, p.size(), p) != 0) return std::nullopt;
  int64_t v = 0;
  for (size_t i = p.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

}  // namespace

Status CheckWritable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgument("--checkpoint-dir " + Elide(dir) + " cannot be created: " + ec.message());
  const std::string probe = (fs::path(dir) / (".tfjob-write-check." + std::to_string(getpid()))).string();
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return InvalidArgument("--checkpoint-dir " + Elide(dir) + " is not writable: " + std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
  return Status::Ok();
}

Manager::Manager(std::string dir, int keep, bool ignore_damaged)
    : dir_(std::move(dir)), keep_(std::max(1, keep)), ignore_damaged_(ignore_damaged) {}

StatusOr<std::string> Manager::Prepare(int64_t step) const {
  const fs::path d = fs::path(dir_) / (kPrefix + std::to_string(step));
  std::error_code ec;
  // A leftover of an interrupted attempt at this step is never committed
  // (the commit is the last write), so it is safe to clear.
  if (!fs::exists(d / kMeta, ec)) fs::remove_all(d, ec);
  fs::create_directories(d, ec);
  if (ec) return Unavailable("checkpoint: cannot create " + d.string() + ": " + ec.message());
  return d.string();
}

Status Manager::Commit(int64_t step, bool final, const nlohmann::json& state,
                       const std::vector<std::string>& files) const {
  const fs::path d = fs::path(dir_) / (kPrefix + std::to_string(step));
  nlohmann::json meta{{"step", step}, {"final", final}, {"state", state}, {"files", nlohmann::json::array()}};
  for (const std::string& f : files) {
    // Streamed, and verified on the way: a file of any size costs a chunk of
    // memory, and nothing damaged is ever committed.
    ASSIGN_OR_RETURN(FileCheck c, Check((d / f).string()));
    meta["files"].push_back({{"name", f}, {"bytes", c.bytes}, {"adler32", Hex(c.adler32)}});
  }
  std::string text = meta.dump(2);
  text += "\n";
  const std::string sum = Hex(Crc(text));
  text.append(kTrailer).append(sum).append("\n");
  RETURN_IF_ERROR(WriteFileAtomic((d / kMeta).string(), text));

  // Retention: the newest `keep_` committed checkpoints stay; uncommitted
  // directories older than the newest commit are debris of crashed attempts.
  int kept = 0;
  for (const auto& [s, path] : List()) {
    std::error_code ec;
    const bool committed = fs::exists(fs::path(path) / kMeta, ec);
    if (s > step) continue;  // not ours to judge
    if (committed && kept < keep_) {
      ++kept;
      continue;
    }
    fs::remove_all(path, ec);
  }
  return Status::Ok();
}

StatusOr<Committed> Manager::Verify(const std::string& ckpt_dir) const {
  const fs::path d(ckpt_dir);
  auto text = ReadFile((d / kMeta).string());
  if (!text.ok()) return DataLoss(ckpt_dir + ": not committed (no readable " + kMeta + ")");
  const size_t t = text->rfind(kTrailer);
  if (t == std::string::npos || t == 0 || (*text)[t - 1] != '\n') {
    return DataLoss((d / kMeta).string() + ": no checksum trailer (truncated?)");
  }
  const std::string body = text->substr(0, t);
  const std::string want = text->substr(t + std::string(kTrailer).size());
  if (want != Hex(Crc(body)) + "\n") return DataLoss((d / kMeta).string() + ": checksum mismatch");
  nlohmann::json meta = nlohmann::json::parse(body, nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("step") || !meta["step"].is_number_integer() ||
      !meta.contains("files") || !meta["files"].is_array()) {
    return DataLoss((d / kMeta).string() + ": malformed");
  }
  Committed c;
  c.step = meta["step"].get<int64_t>();
  c.final = meta.value("final", false);
  c.dir = ckpt_dir;
  c.state = meta.value("state", nlohmann::json::object());
  for (const auto& f : meta["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("adler32") || !f["adler32"].is_string()) {
      return DataLoss((d / kMeta).string() + ": malformed file entry");
    }
    const std::string name = f["name"].get<std::string>();
    // A file name from meta.json stays inside the checkpoint directory.
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return DataLoss((d / kMeta).string() + ": bad file name \"" + name + "\"");
    }
    const std::string path = (d / name).string();
    auto check = Check(path);
    if (!check.ok()) {
      return check.status().code() == Code::kNotFound ? DataLoss(path + ": missing") : check.status();
    }
    if (check->bytes != f["bytes"].get<uint64_t>() || Hex(check->adler32) != f["adler32"].get<std::string>()) {
      return DataLoss(path + ": size or checksum differs from " + kMeta);
    }
    c.files.push_back(path);
  }
  return c;
}

StatusOr<std::optional<Committed>> Manager::Latest(std::ostream* log) const {
  std::vector<std::string> damaged;
  for (const auto& [step, path] : List()) {
    std::error_code ec;
    if (!fs::exists(fs::path(path) / kMeta, ec)) continue;  // an attempt in progress or abandoned
    auto c = Verify(path);
    if (c.ok()) return std::optional<Committed>(std::move(c).value());
    if (log) *log << "checkpoint: skipping " << path << ": " << c.status().message() << std::endl;
    damaged.push_back(fs::path(path).filename().string() + " (" + Elide(c.status().message(), 160) + ")");
  }
  if (!damaged.empty() && !ignore_damaged_) {
    std::string list;
    for (size_t i = 0; i < damaged.size() && i < 5; ++i) list += (i ? "; " : "") + damaged[i];
    if (damaged.size() > 5) list += "; and " + std::to_string(damaged.size() - 5) + " more";
    return DataLoss("every checkpoint in " + dir_ + " is damaged: " + list +
                    "; repair or remove them, or pass --ignore-damaged-checkpoints to train from step 0");
  }
  return std::optional<Committed>();
}

std::optional<int64_t> Manager::NewestCommittedStep() const {
  for (const auto& [step, path] : List()) {
    std::error_code ec;
    if (fs::exists(fs::path(path) / kMeta, ec)) return step;
  }
  return std::nullopt;
}

std::vector<std::pair<int64_t, std::string>> Manager::List() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    if (auto s = StepOf(it->path().filename().string())) out.emplace_back(*s, it->path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace tfjob::checkpoint
