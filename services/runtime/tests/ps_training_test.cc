// Parameter-server training over the data plane:
//  - a PS task (the real binary) SIGKILLed and started again on the same
//    port is reached by the same PsClient over both planes, gRPC (control)
//    and the data plane, without being told anything (the chief and the
//    workers rely on this after every PS restart);
//  - fit with an Embedding pulls only the rows each batch uses, and trains
//    exactly as pulling whole tables does;
//  - with prefetching workers every step's update lands exactly once.
#include <fcntl.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/net/net.h"
#include "services/programs/programs.h"
#include "services/ps/ps_client.h"
#include "services/runtime/in_process_cluster.h"
#include "services/tensor/precision.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob::runtime {
namespace {

namespace t = ::tfjob::testing;

// The runtime as task ps:0, serving on `listener` (inherited, so no port is
// picked and raced for).
std::unique_ptr<t::Process> StartPs(net::Listener& listener, std::map<std::string, std::string> env = {}) {
  const std::string address = "127.0.0.1:" + std::to_string(listener.port);
  const nlohmann::json tf_config{{"cluster", {{"ps", {address}}}}, {"task", {{"type", "ps"}, {"index", 0}}}};
  fcntl(listener.fd.get(), F_SETFD, 0);
  env["TF_CONFIG"] = tf_config.dump();
  env["TFJOB_LISTEN_FD"] = std::to_string(listener.fd.get());
  auto p = std::make_unique<t::Process>(std::vector<std::string>{t::BinDir() + "/tfjob-runtime", "counter"}, env);
  listener.fd.Reset();
  return p;
}

TEST(PsRestartTest, TheSameClientReachesARestartedPsOverBothPlanes) {
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = listener->port;
  auto ps = StartPs(*listener);
  ps::ClientOptions o;
  o.retry.total_timeout = std::chrono::milliseconds(20000);
  ps::PsClient client("127.0.0.1:" + std::to_string(port), o);
  auto first = client.GetStatus();
  ASSERT_TRUE(first.ok()) << first.status() << "\n" << ps->output();
  ASSERT_TRUE(client.CreateVariable("w", *Tensor::FromVector({2}, std::vector<float>{1, 2}), std::nullopt).ok());
  ASSERT_TRUE(client.Pull({"w"}).ok());

  for (int round = 0; round < 3; ++round) {
    ps->Stop(SIGKILL);
    auto again = net::Listen("127.0.0.1", port);
    ASSERT_TRUE(again.ok()) << again.status();
    ps = StartPs(*again);
    auto status = client.GetStatus();
    ASSERT_TRUE(status.ok()) << "round " << round << ": " << status.status() << "\n" << ps->output();
    EXPECT_NE(status->incarnation, first->incarnation);
    EXPECT_TRUE(status->variables.empty());
    EXPECT_EQ(client.Pull({"w"}).status().code(), Code::kNotFound);
    ASSERT_TRUE(client.CreateVariable("w", *Tensor::FromVector({2}, std::vector<float>{3, 4}), std::nullopt).ok());
    EXPECT_TRUE(AllClose((*client.Pull({"w"}))[0], *Tensor::FromVector({2}, std::vector<float>{3, 4})));
  }
}

// TFJOB_PS_MAX_TENSOR_BYTES sets a PS task's limit: a tensor above it is
// INVALID_ARGUMENT and the PS serves on; a value that is not a byte count
// stops the task with one line (exit code 2).
TEST(PsRestartTest, TheTensorLimitComesFromTheEnvironment) {
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = listener->port;
  auto ps = StartPs(*listener, {{"TFJOB_PS_MAX_TENSOR_BYTES", "1024"}});
  ps::PsClient client("127.0.0.1:" + std::to_string(port));
  auto big = client.CreateVariable("big", Tensor::Zeros(DType::kFloat32, {257}), std::nullopt);
  EXPECT_EQ(big.status().code(), Code::kInvalidArgument) << big.status() << "\n" << ps->output();
  EXPECT_THAT(big.status().message(), ::testing::HasSubstr("more than the limit of 1024"));
  EXPECT_TRUE(client.CreateVariable("small", Tensor::Zeros(DType::kFloat32, {256}), std::nullopt).ok());
  ps->Stop(SIGKILL);

  auto again = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(again.ok());
  auto bad = StartPs(*again, {{"TFJOB_PS_MAX_TENSOR_BYTES", "lots"}});
  for (int i = 0; i < 500 && bad->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(bad->Stop(SIGKILL), 2) << bad->output();
  EXPECT_THAT(bad->output(),
              ::testing::HasSubstr("TFJOB_PS_MAX_TENSOR_BYTES: \"lots\" is not a positive number of bytes"));
}

// A bag of 3 ids from a 5000-row table per example; the label is a fixed
// function of the ids, so the model can learn it.
std::string WriteEmbeddingJob(const std::string& dir) {
  std::mt19937 rng(3);
  for (const auto& [name, n] : std::vector<std::pair<std::string, int>>{{"train.csv", 1600}, {"eval.csv", 320}}) {
    std::ofstream out(dir + "/" + name);
    out << "a,b,c,label\n";
    for (int i = 0; i < n; ++i) {
      int64_t ids[3], odd = 0;
      for (int64_t& id : ids) {
        id = static_cast<int64_t>(rng() % 5000);
        odd += id % 2;
      }
      out << ids[0] << "," << ids[1] << "," << ids[2] << "," << (odd >= 2 ? 1 : 0) << "\n";
    }
  }
  const std::string job = dir + "/job.json";
  std::ofstream(job) << R"({
    "name": "embedding", "seed": 5,
    "model": {"input_shape": [3], "input_dtype": "int64", "layers": [
      {"type": "Embedding", "input_dim": 5000, "output_dim": 8, "combiner": "mean"},
      {"type": "Dense", "units": 2, "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "optimizer": {"type": "Adagrad", "learning_rate": 0.5},
    "metrics": ["accuracy"],
    "data": {"train": {"source": "csv", "path": "train.csv"}, "eval": {"source": "csv", "path": "eval.csv"}},
    "batch_size": 16, "epochs": 2})";
  return job;
}

// One worker, one closure at a time, no prefetch (unless asked): training is
// deterministic, so pulling only the batch's rows must give exactly what
// whole tables give.
nlohmann::json TrainEmbedding(const std::string& dir, const std::string& pull, bool prefetch = false,
                              const std::string& job = "job.json", const std::string& keras_model = "",
                              const std::vector<std::string>& extra = {}) {
  auto programs = programs::BuiltinPrograms();
  auto cluster = InProcessCluster::Start(2, 1, programs);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  std::ostringstream out, err;
  programs::ChiefContext ctx{(*cluster)->ps_addresses(), (*cluster)->worker_addresses(), {}, &out, &err};
  const std::string summary = dir + "/" + pull + (prefetch ? "-prefetch" : "") + ".json";
  std::vector<std::string> args{"--config",
                                dir + "/" + job,
                                "--data-dir",
                                dir,
                                "--partitioner",
                                "fixed:2",
                                "--ps-closures-per-worker",
                                "1",
                                "--ps-prefetch",
                                prefetch ? "true" : "false",
                                "--ps-pull",
                                pull,
                                "--summary-json",
                                summary};
  if (!keras_model.empty()) args.insert(args.end(), {"--keras-model", dir + "/" + keras_model});
  args.insert(args.end(), extra.begin(), extra.end());
  EXPECT_EQ(programs::MakeFit()->RunChief(args, ctx), 0) << err.str();
  return t::ReadJsonFile(summary);
}

// One step per closure and one closure at a time: with prefetching, a
// closure's push goes with the pull of the next closure's step (one
// exchange per PS), so every step still sees every update before it, as
// without prefetching, and the two train the same model, bit for bit. A
// step pulled ahead while the one before it computed would miss that
// step's update.
TEST(EmbeddingPullTest, OneStepClosuresSeeEveryUpdateWithPrefetchingToo) {
  const std::string dir = t::MakeTempDir("embedding-prefetch");
  WriteEmbeddingJob(dir);
  const nlohmann::json ahead = TrainEmbedding(dir, "rows", /*prefetch=*/true);
  const nlohmann::json plain = TrainEmbedding(dir, "rows", /*prefetch=*/false);
  ASSERT_TRUE(ahead.is_object() && plain.is_object());
  EXPECT_EQ(ahead["ps_prefetch"], true);
  EXPECT_EQ(plain["ps_prefetch"], false);
  EXPECT_EQ(ahead["steps_per_execution"], 1);
  EXPECT_EQ(ahead["ps_closures_per_worker"], 1);
  EXPECT_EQ(ahead["ps_applied_updates"], 200 * 6);
  EXPECT_EQ(ahead["eval_loss"], plain["eval_loss"]);
  ASSERT_EQ(ahead["history"].size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(ahead["history"][e]["loss"], plain["history"][e]["loss"]) << "epoch " << e + 1;
  }
}

// A Functional model whose Embedding takes one named input (the ids in
// column a) beside a float input (column b): its rows are pulled alone too,
// and the packed input's other values pass through unchanged.
TEST(EmbeddingPullTest, FunctionalModelsPullTheRowsOfTheirInputsEmbedding) {
  const std::string dir = t::MakeTempDir("embedding-pull-functional");
  WriteEmbeddingJob(dir);
  nlohmann::json job = t::ReadJsonFile(dir + "/job.json");
  job.erase("model");
  std::ofstream(dir + "/functional-job.json") << job.dump();
  std::ofstream(dir + "/model.json") << R"({"class_name": "Model", "config": {"name": "f", "layers": [
    {"name": "a", "class_name": "InputLayer", "config": {"batch_input_shape": [null, 1], "dtype": "int32", "name": "a"}, "inbound_nodes": []},
    {"name": "b", "class_name": "InputLayer", "config": {"batch_input_shape": [null, 1], "dtype": "float32", "name": "b"}, "inbound_nodes": []},
    {"name": "emb", "class_name": "Embedding", "config": {"input_dim": 5000, "output_dim": 8, "name": "emb"}, "inbound_nodes": [[["a", 0, 0, {}]]]},
    {"name": "flat", "class_name": "Flatten", "config": {"name": "flat"}, "inbound_nodes": [[["emb", 0, 0, {}]]]},
    {"name": "scaled", "class_name": "Rescaling", "config": {"name": "scaled", "scale": 0.0002, "offset": 0}, "inbound_nodes": [[["b", 0, 0, {}]]]},
    {"name": "cat", "class_name": "Concatenate", "config": {"name": "cat", "axis": -1}, "inbound_nodes": [[["flat", 0, 0, {}], ["scaled", 0, 0, {}]]]},
    {"name": "out", "class_name": "Dense", "config": {"name": "out", "units": 2, "activation": "softmax"}, "inbound_nodes": [[["cat", 0, 0, {}]]]}],
    "input_layers": [["a", 0, 0], ["b", 0, 0]], "output_layers": [["out", 0, 0]]}})";
  const nlohmann::json rows = TrainEmbedding(dir, "rows", false, "functional-job.json", "model.json");
  const nlohmann::json full = TrainEmbedding(dir, "full", false, "functional-job.json", "model.json");
  ASSERT_TRUE(rows.is_object() && full.is_object());
  EXPECT_EQ(rows["steps"], 200);
  EXPECT_EQ(rows["eval_loss"], full["eval_loss"]);  // the same updates: bit for bit
  // Whole tables: 5000 x 8 floats every step; rows: at most 16 (one id per example).
  const int64_t dense = (9 * 2 + 2) * 4;
  EXPECT_EQ(full["ps_pulled_bytes"].get<int64_t>(), 200 * (5000 * 8 * 4 + dense));
  EXPECT_LE(rows["ps_pulled_bytes"].get<int64_t>(), 200 * (16 * 8 * 4 + dense));
  // Column c, a third of what decides the label, is not an input here:
  // the point is the same training, not accuracy.
  EXPECT_EQ(rows["eval_accuracy"], full["eval_accuracy"]);
}

TEST(EmbeddingPullTest, RowPullsTrainExactlyAsWholeTablesAndMoveFarLess) {
  const std::string dir = t::MakeTempDir("embedding-pull");
  WriteEmbeddingJob(dir);
  const nlohmann::json rows = TrainEmbedding(dir, "rows");
  const nlohmann::json full = TrainEmbedding(dir, "full");
  ASSERT_TRUE(rows.is_object() && full.is_object());
  EXPECT_EQ(rows["ps_pull"], "rows");
  EXPECT_EQ(full["ps_pull"], "full");
  EXPECT_EQ(rows["steps"], 200);
  // Same updates in the same order: the same model, bit for bit.
  EXPECT_EQ(rows["eval_loss"], full["eval_loss"]);
  ASSERT_EQ(rows["history"].size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(rows["history"][e]["loss"], full["history"][e]["loss"]) << "epoch " << e + 1;
    EXPECT_EQ(rows["history"][e]["accuracy"], full["history"][e]["accuracy"]) << "epoch " << e + 1;
  }
  EXPECT_GT(rows["eval_accuracy"].get<double>(), 0.6);
  // Whole tables: 5000 x 8 floats every step; rows: at most 48 rows.
  const int64_t dense = (8 * 2 + 2) * 4;
  EXPECT_EQ(full["ps_pulled_bytes"].get<int64_t>(), 200 * (5000 * 8 * 4 + dense));
  EXPECT_LE(rows["ps_pulled_bytes"].get<int64_t>(), 200 * (48 * 8 * 4 + dense));
  EXPECT_GT(rows["ps_pulled_bytes"].get<int64_t>(), 200 * dense);
  // Every step's update landed once on every shard (fixed:2 splits all three
  // variables: table, kernel and bias, two shards each).
  EXPECT_EQ(rows["ps_applied_updates"], 200 * 6);
  EXPECT_EQ(full["ps_applied_updates"], 200 * 6);
  // Where the workers' time went: every step counted once, each part
  // measured, and no part larger than the closures' whole time.
  const nlohmann::json& t = rows["worker_step_seconds"];
  ASSERT_TRUE(t.is_object()) << rows.dump();
  EXPECT_EQ(t["steps"], 200);
  double parts = 0;
  for (const char* k : {"input", "pull_wait", "compute", "push", "record", "push_wait"}) {
    ASSERT_TRUE(t[k].is_number()) << k;
    EXPECT_GE(t[k].get<double>(), 0.0) << k;
    parts += t[k].get<double>();
  }
  EXPECT_GT(t["compute"].get<double>(), 0.0);
  EXPECT_LE(parts, t["closure"].get<double>() * 1.001);
}

// The embedding job on 2 PS and `workers` workers with fit's default flags
// but `flags`; its summary (null when it did not run).
nlohmann::json TrainOnWorkers(const std::string& name, int workers, std::vector<std::string> flags) {
  const std::string dir = t::MakeTempDir(name);
  WriteEmbeddingJob(dir);
  auto programs = programs::BuiltinPrograms();
  auto cluster = InProcessCluster::Start(2, workers, programs);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  std::ostringstream out, err;
  programs::ChiefContext ctx{(*cluster)->ps_addresses(), (*cluster)->worker_addresses(), {}, &out, &err};
  const std::string summary = dir + "/out.json";
  std::vector<std::string> args = {"--config",      dir + "/job.json", "--data-dir",     dir,
                                   "--partitioner", "fixed:2",         "--summary-json", summary};
  args.insert(args.end(), flags.begin(), flags.end());
  EXPECT_EQ(programs::MakeFit()->RunChief(args, ctx), 0) << err.str();
  return t::ReadJsonFile(summary);
}

// --ps-closures-per-worker auto with closures of one step: three running on
// a lone worker, and from two workers on one each, as TensorFlow runs them
// (each running closure is an update the others' pulled values miss).
TEST(EmbeddingPullTest, AutoRunsThreeClosuresOnALoneWorkerAndOneEachOnTwo) {
  const nlohmann::json one = TrainOnWorkers("embedding-auto-1", 1, {});
  const nlohmann::json two = TrainOnWorkers("embedding-auto-2", 2, {});
  ASSERT_TRUE(one.is_object() && two.is_object());
  EXPECT_EQ(one["ps_closures_per_worker"], 3);
  EXPECT_EQ(two["ps_closures_per_worker"], 1);
  for (const nlohmann::json& s : {one, two}) {
    EXPECT_EQ(s["steps"], 200);
    EXPECT_EQ(s["ps_applied_updates"], 200 * 6);
    EXPECT_GT(s["eval_accuracy"].get<double>(), 0.6);
  }
}

// Prefetching workers (the default), several closures in flight on each
// of two workers: every step is applied exactly once on every shard.
TEST(EmbeddingPullTest, PrefetchingWorkersApplyEveryStepOnce) {
  const nlohmann::json s =
      TrainOnWorkers("embedding-prefetch", 2, {"--steps-per-execution", "3", "--ps-closures-per-worker", "2"});
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["ps_prefetch"], true);
  EXPECT_EQ(s["ps_closures_per_worker"], 2);
  EXPECT_EQ(s["steps"], 200);
  EXPECT_EQ(s["ps_applied_updates"], 200 * 6);
  EXPECT_GT(s["eval_accuracy"].get<double>(), 0.6);
}

// Closures of one step (the default) with three running at once on each
// of two workers (one more may wait there): still every step is applied
// exactly once.
TEST(EmbeddingPullTest, ThreeOneStepClosuresPerWorkerApplyEveryStepOnce) {
  const nlohmann::json s = TrainOnWorkers("embedding-three", 2, {"--ps-closures-per-worker", "3"});
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["steps_per_execution"], 1);
  EXPECT_EQ(s["ps_closures_per_worker"], 3);
  EXPECT_EQ(s["steps"], 200);
  EXPECT_EQ(s["ps_applied_updates"], 200 * 6);
  EXPECT_EQ(s["closures"]["completed"], 200);
  EXPECT_GT(s["eval_accuracy"].get<double>(), 0.6);
}

// --mixed-precision reaches the workers (each layer's policy travels with
// the job): one worker, one closure at a time, so training is
// deterministic and a different result means the workers computed in
// bfloat16; it still learns as well.
TEST(PsMixedPrecisionTest, WorkersComputeInTheChiefsPolicy) {
  if (!BfloatPath().ok()) GTEST_SKIP() << BfloatPath().message();
  const std::string dir = t::MakeTempDir("ps-mixed");
  WriteEmbeddingJob(dir);
  const nlohmann::json f32 = TrainEmbedding(dir, "rows");
  const nlohmann::json bf16 = TrainEmbedding(dir, "rows", false, "job.json", "", {"--mixed-precision", "bfloat16"});
  EXPECT_EQ(bf16["dtype_policy"], "mixed_bfloat16");
  EXPECT_NE(bf16["eval_loss"].get<double>(), f32["eval_loss"].get<double>());
  EXPECT_NEAR(bf16["eval_accuracy"].get<double>(), f32["eval_accuracy"].get<double>(), 0.05) << bf16.dump();
}

// float16 on parameter servers: each worker scales the loss, and a step
// whose gradients overflow pushes nothing and halves the worker's scale.
// An initial scale of 2^30 forces the overflows; one worker running one
// closure at a time makes the count exact: the scale left is 2^(30 -
// skipped), and the PS applied the updates of the other steps only.
TEST(PsMixedPrecisionTest, Float16WorkersSkipOverflowingStepsAndPushNothing) {
  const std::string dir = t::MakeTempDir("ps-f16");
  WriteEmbeddingJob(dir);
  nlohmann::json job = t::ReadJsonFile(dir + "/job.json");
  job["optimizer"]["loss_scale"] = {{"initial_scale", 1073741824.0}, {"dynamic_growth_steps", 100000}};
  std::ofstream(dir + "/job16.json") << job.dump();
  auto run = [&](const std::string& config, const std::string& summary, const std::vector<std::string>& extra) {
    std::vector<std::string> argv{t::RuntimeBinary(),
                                  "local",
                                  "--ps",
                                  "1",
                                  "--workers",
                                  "1",
                                  "--",
                                  "fit",
                                  "--config",
                                  dir + "/" + config,
                                  "--data-dir",
                                  dir,
                                  "--ps-closures-per-worker",
                                  "1",
                                  "--summary-json",
                                  dir + "/" + summary};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = t::Run(argv, {{"TFJOB_FLOAT16_EMULATION", "1"}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return t::ReadJsonFile(dir + "/" + summary);
  };
  const nlohmann::json f32 = run("job.json", "f32.json", {});
  const nlohmann::json f16 = run("job16.json", "f16.json", {"--mixed-precision", "float16"});
  ASSERT_TRUE(f16.contains("skipped_steps")) << f16.dump();
  const int64_t skipped = f16["skipped_steps"].get<int64_t>();
  const int64_t steps = f16["steps"].get<int64_t>();
  EXPECT_GE(skipped, 5);
  EXPECT_LT(skipped, steps / 2);
  EXPECT_EQ(f16["loss_scale"].get<double>(), std::ldexp(1.0, 30 - static_cast<int>(skipped)));
  EXPECT_EQ(f32["steps"], steps);
  EXPECT_EQ(f16["ps_applied_updates"].get<int64_t>() * steps,
            f32["ps_applied_updates"].get<int64_t>() * (steps - skipped));
  EXPECT_GT(f16["eval_accuracy"].get<double>(), 0.6) << f16.dump();
}

}  // namespace
}  // namespace tfjob::runtime
