// Writes the seed corpora in fuzz/corpus/ from real inputs: the examples and
// test data as they are, their TFJobs converted to JSON by the codec, and
// TF_CONFIGs, tensors and checkpoints produced by the project's own writers.
// Seeds are valid inputs on purpose: libFuzzer mutates from there, so it
// reaches the code behind the syntax checks in seconds.
//
// Usage: fuzz_make_corpus SOURCE_DIR CORPUS_DIR (fuzz/make_corpus.sh).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/files.h"
#include "operator/api/codec.h"
#include "proto/tensor.pb.h"
#include "services/checkpoint/checkpoint.h"
#include "services/cluster/cluster.h"
#include "services/data/example.h"
#include "services/data/tfrecord.h"
#include "services/ps/ps_service.h"
#include "services/ps/wire.h"
#include "services/rpc/rpc.h"

namespace fs = std::filesystem;
using namespace tfjob;

namespace {

fs::path g_corpus;

void Put(const std::string& harness, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_corpus / harness;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) {
    std::cerr << "cannot write " << (dir / name) << "\n";
    std::exit(1);
  }
}

template <typename T>
T Must(StatusOr<T> v, const std::string& what) {
  if (!v.ok()) {
    std::cerr << what << ": " << v.status() << "\n";
    std::exit(1);
  }
  return std::move(v).value();
}

// "examples/mnist/mlp.json" -> "examples_mnist_mlp.json".
std::string FlatName(const fs::path& rel) {
  std::string s = rel.generic_string();
  for (char& c : s) {
    if (c == '/') c = '_';
  }
  return s;
}

// Tracked inputs under `dirs` with extension `ext`, in a stable order.
std::vector<fs::path> Inputs(const fs::path& root, const std::vector<std::string>& dirs, const std::string& ext) {
  std::vector<fs::path> out;
  for (const std::string& d : dirs) {
    if (!fs::exists(root / d)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / d)) {
      if (e.is_regular_file() && e.path().extension() == ext) out.push_back(fs::relative(e.path(), root));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void TfConfigs() {
  using cluster::ClusterConfig;
  using cluster::ClusterSpec;
  auto dense = [](std::map<std::string, std::vector<std::string>> jobs) {
    return Must(ClusterSpec::FromLists(jobs), "cluster");
  };
  ClusterConfig ps;
  ps.cluster = dense({{"chief", {"chief-0:2222"}},
                      {"ps", {"ps-0:2222", "ps-1:2222"}},
                      {"worker", {"worker-0:2222", "worker-1:2222", "worker-2:2222"}}});
  ps.task = cluster::TaskId{"worker", 1};
  Put("tf_config", "chief_ps_workers.json", cluster::ToTfConfigJson(ps));

  ClusterConfig cloud = ps;
  cloud.task = cluster::TaskId{"ps", 0};
  cloud.environment = "cloud";
  cloud.rpc_layer = "grpc";
  Put("tf_config", "cloud_grpc.json", cluster::ToTfConfigJson(cloud));

  ClusterConfig evaluator;
  evaluator.cluster = dense({{"master", {"10.0.0.1:2222"}}, {"worker", {"[::1]:2223", "[fe80::1%eth0]:2224"}}});
  evaluator.task = cluster::TaskId{"evaluator", 0};
  Put("tf_config", "master_ipv6_evaluator.json", cluster::ToTfConfigJson(evaluator));

  ClusterConfig sparse;
  if (!sparse.cluster.AddTask("worker", 3, "host-3.example.com:65535").ok() ||
      !sparse.cluster.AddTask("worker", 7, "host-7:1").ok() || !sparse.cluster.AddJob("ps", {}).ok()) {
    std::cerr << "sparse cluster\n";
    std::exit(1);
  }
  sparse.task = cluster::TaskId{"worker", 7};
  Put("tf_config", "sparse_worker.json", cluster::ToTfConfigJson(sparse));

  ClusterConfig no_task;
  no_task.cluster = dense({{"worker", {"localhost:12345"}}, {"custom_job", {"a:1", "b:2"}}});
  Put("tf_config", "no_task_custom_job.json", cluster::ToTfConfigJson(no_task));

  // Spellings TensorFlow accepts that the serialiser never writes.
  Put("tf_config", "ai_platform.json",
      R"({"cluster": {"chief": ["c:2222"], "worker": {"0": "w0:2222", "1": "w1:2222"}},)"
      R"( "task": {"type": "worker", "index": "1", "trial": "3", "cloud": "x"}, "job": {"args": []}})");
}

void JobConfigs(const fs::path& root) {
  for (const fs::path& rel : Inputs(root, {"examples", "tests/support/data"}, ".json")) {
    Put("job_config", FlatName(rel), Must(ReadFile((root / rel).string()), rel.string()));
  }
}

void TfJobs(const fs::path& root) {
  for (const fs::path& rel : Inputs(root, {"examples", "operator/api/tests/testdata"}, ".yaml")) {
    const std::string text = Must(ReadFile((root / rel).string()), rel.string());
    Put("tfjob_yaml", FlatName(rel), text);
    // Invalid manifests are seeds too; only their JSON form needs a parse.
    auto docs = op::api::YamlDocumentsToJson(text, rel.string());
    if (!docs.ok()) continue;
    int n = 0;
    for (const nlohmann::json& doc : *docs) {
      std::string name = FlatName(rel);
      name = name.substr(0, name.size() - 5) + (n++ ? "_" + std::to_string(n) : "") + ".json";
      Put("tfjob_json", name, doc.dump(2) + "\n");
    }
  }
  for (const fs::path& rel : Inputs(root, {"operator/api/tests/testdata"}, ".json")) {
    Put("tfjob_json", FlatName(rel), Must(ReadFile((root / rel).string()), rel.string()));
  }
}

Tensor Floats(Shape shape) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape));
  float v = 0.5f;
  for (float& x : t.flat<float>()) x = v += 1.25f;
  return t;
}

Tensor Ints(Shape shape) {
  Tensor t = Tensor::Zeros(DType::kInt64, std::move(shape));
  int64_t v = -3;
  for (int64_t& x : t.flat<int64_t>()) x = v++ * 1000003;
  return t;
}

void Tensors() {
  const std::vector<std::pair<std::string, Tensor>> tensors = {{"float_2x3", Floats({2, 3})},
                                                               {"int64_4", Ints({4})},
                                                               {"scalar", Tensor::Scalar(3.5f)},
                                                               {"empty_0x5", Floats({0, 5})},
                                                               {"float_2x1x2", Floats({2, 1, 2})}};
  for (const auto& [name, t] : tensors) {
    proto::Tensor p;
    rpc::TensorToProto(t, &p);
    Put("tensor", name + ".pb", p.SerializeAsString());
  }
}

void Checkpoints() {
  using checkpoint::Entry;
  Put("checkpoint", "empty.ckpt", checkpoint::Encode({}));
  Put("checkpoint", "dense_adam.ckpt",
      checkpoint::Encode({Entry{"dense/kernel", 12, {Floats({3, 2}), Floats({3, 2}), Floats({3, 2})}},
                          Entry{"dense/bias", 12, {Floats({2}), Floats({2}), Floats({2})}}}));
  Put("checkpoint", "embedding_ids.ckpt",
      checkpoint::Encode({Entry{"embedding/table", 0, {Floats({4, 2})}}, Entry{"global_step", 7, {Ints({})}},
                          Entry{"", 0, {}}, Entry{"ids", -1, {Ints({3}), Floats({0, 2})}}}));
}

// tf.Example records in TFRecord framing: a full record, one with a
// shorter var-length feature, one missing a feature, and an empty file.
void TfRecords() {
  auto column = [](data::FeatureType type) {
    data::Column c;
    c.type = type;
    return c;
  };
  data::Column image = column(data::FeatureType::kFloat32), words = column(data::FeatureType::kString),
               label = column(data::FeatureType::kInt64);
  image.floats = {0.f, 0.25f, 0.5f, 1.f};
  words.strings = {"avenger", "hulk", "thor"};
  label.ints = {7};
  const std::string full = data::EncodeExample({{"image", image}, {"words", words}, {"label", label}});
  words.strings = {"batman"};
  const std::string short_words = data::EncodeExample({{"image", image}, {"words", words}, {"label", label}});
  const std::string no_label = data::EncodeExample({{"image", image}});
  Put("tfrecord", "two_examples.tfrecord", data::FrameRecord(full) + data::FrameRecord(short_words));
  Put("tfrecord", "missing_label.tfrecord", data::FrameRecord(full) + data::FrameRecord(no_label));
  Put("tfrecord", "empty.tfrecord", "");
}

void KerasModels(const fs::path& root) {
  for (const fs::path& rel : Inputs(root, {"examples/keras"}, ".json")) {
    Put("keras_model", FlatName(rel), Must(ReadFile((root / rel).string()), rel.string()));
  }
}

// Data-plane conversations as a PsClient sends them: a hello, then frames
// (services/ps/wire.h) whose tensors travel raw after the meta.
std::string Frame(uint32_t magic, uint32_t kind, const std::string& meta, const std::string& payload) {
  ps::wire::Frame f{magic, kind, static_cast<uint32_t>(meta.size()), 0, payload.size()};
  std::string out(reinterpret_cast<const char*>(&f), sizeof f);
  return out + meta + payload;
}
std::string Hello(const std::string& token = "") { return Frame(ps::wire::kHelloMagic, ps::wire::kVersion, token, ""); }
std::string Request(ps::wire::Op op, const google::protobuf::MessageLite& meta, const std::vector<Tensor>& tensors) {
  std::string payload;
  for (const Tensor& t : tensors) payload.append(reinterpret_cast<const char*>(t.raw()), t.bytes());
  return Frame(ps::wire::kRequestMagic, static_cast<uint32_t>(op), meta.SerializeAsString(), payload);
}
std::string Create(const std::string& name, const Tensor& t, bool adam) {
  proto::CreateVariableRequest r;
  r.set_name(name);
  ps::wire::HeaderOf(t, r.mutable_initial_value());
  if (adam) {
    model::OptimizerSpec o;
    o.type = model::OptimizerType::kAdam;
    *r.mutable_optimizer() = ps::OptimizerToProto(o);
  }
  return Request(ps::wire::Op::kCreateVariable, r, {t});
}
std::string Push(uint64_t closure, proto::Update::Kind kind, const std::string& name, const Tensor& value,
                 const std::vector<int64_t>& rows = {}) {
  proto::PushRequest r;
  r.set_closure_id(closure);
  proto::Update* u = r.add_updates();
  u->set_name(name);
  u->set_kind(kind);
  ps::wire::HeaderOf(value, u->mutable_value());
  for (int64_t row : rows) u->add_rows(row);
  return Request(ps::wire::Op::kPush, r, {value});
}
std::string Pull(const std::vector<std::string>& names, const std::vector<int64_t>& rows = {}) {
  proto::PullRequest r;
  for (const auto& n : names) r.add_names(n);
  for (int64_t row : rows) r.add_rows(row);
  return Request(ps::wire::Op::kPull, r, {});
}

std::string PushPull(uint64_t closure, const std::string& name, const Tensor& value,
                     const std::vector<std::string>& names) {
  proto::PushPullRequest r;
  r.mutable_push()->set_closure_id(closure);
  proto::Update* u = r.mutable_push()->add_updates();
  u->set_name(name);
  u->set_kind(proto::Update::APPLY_GRADIENT);
  ps::wire::HeaderOf(value, u->mutable_value());
  for (const auto& n : names) r.mutable_pull()->add_names(n);
  return Request(ps::wire::Op::kPushPull, r, {value});
}

void PsData() {
  Put("ps_data", "hello_only.bin", Hello());
  Put("ps_data", "create_add_pull.bin",
      Hello() + Create("w", Floats({2, 3}), false) + Push(0, proto::Update::ASSIGN_ADD, "w", Floats({2, 3})) +
          Pull({"w"}));
  Put("ps_data", "adam_sparse_rows.bin",
      Hello() + Create("emb", Floats({4, 2}), true) +
          Push(7, proto::Update::APPLY_GRADIENT, "emb", Floats({2, 2}), {3, 1}) +
          Push(7, proto::Update::APPLY_GRADIENT, "emb", Floats({2, 2}), {3, 1}) + Pull({"emb"}, {1, 3, 3}));
  Put("ps_data", "adam_push_pull.bin",
      Hello() + Create("w", Floats({2, 3}), true) + Create("b", Floats({3}), false) +
          PushPull(3, "w", Floats({2, 3}), {"w", "b"}) + PushPull(3, "w", Floats({2, 3}), {"b"}));
  Put("ps_data", "int64_assign.bin",
      Hello() + Create("c", Ints({3}), false) + Push(1, proto::Update::ASSIGN, "c", Ints({3})) + Pull({"c", "c"}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_make_corpus SOURCE_DIR CORPUS_DIR\n";
    return 2;
  }
  const fs::path root = argv[1];
  g_corpus = argv[2];
  TfConfigs();
  JobConfigs(root);
  TfJobs(root);
  Tensors();
  Checkpoints();
  TfRecords();
  KerasModels(root);
  PsData();
  return 0;
}
