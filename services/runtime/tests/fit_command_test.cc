// Runs the real tfjob-runtime binary: the acceptance runs on MNIST and every
// kind of bad input (one error line, exit code 2).
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#include "services/runtime/tests/bad_input.h"

namespace tfjob {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace t = ::tfjob::testing;
using t::ReadText;

std::string Example(const std::string& name) { return t::SourceDir() + "/examples/" + name; }

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

nlohmann::json MlpJob() { return nlohmann::json::parse(ReadText(Example("mnist/mlp.json"))); }

t::RunResult Fit(const std::string& config, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{t::RuntimeBinary(), "fit", "--config", config, "--data-dir", t::MnistDir()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return t::Run(argv);
}

std::string WriteJob(const std::string& dir, const nlohmann::json& job, const std::string& name = "job.json") {
  std::string path = dir + "/" + name;
  WriteFile(path, job.dump(1));
  return path;
}

// --help: the usage on stdout, exit 0 (with no arguments it goes to stderr,
// exit 2); --version names the binary and its version.
TEST(RuntimeCliTest, HelpAndVersion) {
  for (const std::string flag : {"--help", "-h", "help"}) {
    auto r = t::Run({t::RuntimeBinary(), flag});
    EXPECT_EQ(r.exit_code, 0) << flag << r.err;
    EXPECT_THAT(r.out, StartsWith("usage: tfjob-runtime PROGRAM [flags]"));
    EXPECT_THAT(r.out, HasSubstr("TFJOB_CLUSTER_RESOLVER=kubernetes"));
  }
  auto none = t::Run({t::RuntimeBinary()});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, StartsWith("usage: tfjob-runtime"));
  auto v = t::Run({t::RuntimeBinary(), "--version"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_THAT(v.out, ::testing::MatchesRegex("tfjob-runtime [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST(FitAcceptanceTest, SoftmaxOnMnist) {
  std::string dir = t::MakeTempDir("softmax");
  auto r = Fit(Example("mnist/softmax.json"), {"--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = nlohmann::json::parse(ReadText(dir + "/out.json"));
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.915) << s.dump();
  EXPECT_EQ(s["steps"].get<int>(), 10 * 80);
  EXPECT_GT(s["examples_per_second"].get<double>(), 0);
  EXPECT_TRUE(s.contains("eval_loss"));
  EXPECT_THAT(r.out, HasSubstr("Epoch 10/10\n80/80 - "));
}

TEST(FitAcceptanceTest, MlpOnMnist) {
  std::string dir = t::MakeTempDir("mlp");
  auto r = Fit(Example("mnist/mlp.json"), {"--summary-json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = nlohmann::json::parse(ReadText(dir + "/out.json"));
  EXPECT_GE(s["eval_accuracy"].get<double>(), 0.925) << s.dump();
  EXPECT_EQ(s["steps"].get<int>(), 5 * 125);
  EXPECT_THAT(r.out, HasSubstr("Epoch 5/5\n125/125 - "));
}

TEST(FitBadInputTest, MalformedJson) {
  std::string dir = t::MakeTempDir("malformed");
  WriteFile(dir + "/bad.json", "{\"name\": \"x\",, }");
  ExpectBadInput(Fit(dir + "/bad.json"), dir + "/bad.json: malformed JSON at byte 14");
}

TEST(FitBadInputTest, NumbersOutOfRange) {
  const std::string dir = t::MakeTempDir("fit-range");
  std::ofstream(dir + "/huge.json") << R"({"name": "x", "seed": 1e400})";
  ExpectBadInput(Fit(dir + "/huge.json"), dir + "/huge.json: malformed JSON: number overflow parsing '1e400'");
  nlohmann::json job = MlpJob();
  job["seed"] = 1e300;  // a double, but no int64
  ExpectBadInput(Fit(WriteJob(dir, job)), "job.json: seed: expected an integer, got 1e+300");
}

TEST(FitBadInputTest, UnknownField) {
  std::string dir = t::MakeTempDir("unknown-field");
  auto job = MlpJob();
  job["optimizer"]["learning_rat"] = 0.1;
  ExpectBadInput(Fit(WriteJob(dir, job)), "job.json: optimizer.learning_rat: unknown field");
  job = MlpJob();
  job["epoch"] = 3;
  ExpectBadInput(Fit(WriteJob(dir, job)), "job.json: epoch: unknown field");
}

TEST(FitBadInputTest, UnknownLayerAndOptimizer) {
  std::string dir = t::MakeTempDir("unknown-kind");
  auto job = MlpJob();
  job["model"]["layers"][1]["type"] = "Conv9D";
  ExpectBadInput(Fit(WriteJob(dir, job)), "job.json: model.layers[1].type: unknown layer type \"Conv9D\"");
  job = MlpJob();
  job["optimizer"]["type"] = "Adamw";
  ExpectBadInput(Fit(WriteJob(dir, job)), "job.json: optimizer.type: unknown optimizer \"Adamw\"");
}

TEST(FitBadInputTest, DataModelShapeMismatch) {
  std::string dir = t::MakeTempDir("shape");
  auto job = MlpJob();
  job["model"]["input_shape"] = {784};
  ExpectBadInput(Fit(WriteJob(dir, job)),
                 "job.json: data.train: examples have features float32[28, 28] but model.input_shape is float32[784]");
}

TEST(FitBadInputTest, WrongMagicIdx) {
  std::string dir = t::MakeTempDir("magic");
  auto job = MlpJob();
  job["data"]["train"]["images"] = "t10k-labels-idx1-ubyte.gz";  // a labels file where images belong
  ExpectBadInput(Fit(WriteJob(dir, job)),
                 "t10k-labels-idx1-ubyte.gz: bad magic 0x00000801 at offset 0, expected 0x00000803");
}

TEST(FitBadInputTest, TruncatedIdx) {
  std::string dir = t::MakeTempDir("truncated");
  // A plain (uncompressed) IDX header for 10 images of 28x28 and only 100 pixels.
  std::string idx = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
  idx += std::string(100, '\x7f');
  WriteFile(dir + "/images.idx", idx);
  auto job = MlpJob();
  job["data"]["train"]["images"] = dir + "/images.idx";
  job["data"]["train"]["end"] = 10;
  ExpectBadInput(Fit(WriteJob(dir, job)), dir + "/images.idx: truncated at offset 116");
}

TEST(FitBadInputTest, MissingPaths) {
  ExpectBadInput(Fit("/nonexistent/job.json"), "/nonexistent/job.json: cannot open file");
  std::string dir = t::MakeTempDir("missing");
  auto job = MlpJob();
  job["data"]["eval"]["labels"] = "no-such-labels.gz";
  ExpectBadInput(Fit(WriteJob(dir, job)), "no-such-labels.gz: cannot open file");
}

TEST(FitBadInputTest, BadFlags) {
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", Example("mnist/mlp.json"), "--epoch", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("tfjob-runtime: error: unknown flag --epoch"));
  r = t::Run({t::RuntimeBinary(), "fitt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command \"fitt\""));
}

}  // namespace
}  // namespace tfjob

namespace tfjob {
namespace {

// As the operator (and Kubeflow v1.9) writes it: the evaluator is in
// "cluster" too, and the runtime leaves it out of the training cluster.
std::string EvaluatorTfConfig() {
  return R"({"cluster":{"chief":["127.0.0.1:1"],"evaluator":["127.0.0.1:4"],"ps":["127.0.0.1:2"],"worker":["127.0.0.1:3"]},)"
         R"("task":{"type":"evaluator","index":0},"environment":"cloud"})";
}

TEST(FitBadInputTest, CheckpointFlags) {
  const std::string job = Example("mnist/mlp.json");
  ExpectBadInput(Fit(job, {"--checkpoint-every-steps", "10"}), "needs --checkpoint-dir");
  ExpectBadInput(Fit(job, {"--checkpoint-dir", "/tmp/x", "--checkpoint-every-steps", "-1"}),
                 "flag --checkpoint-every-steps: must be >= 0");
  ExpectBadInput(Fit(job, {"--checkpoint-dir", "/tmp/x", "--checkpoint-keep", "0"}),
                 "flag --checkpoint-keep: must be >= 1");
}

TEST(FitBadInputTest, StrategyFlags) {
  const std::string job = Example("mnist/mlp.json");
  ExpectBadInput(Fit(job, {"--strategy", "mirroredd"}), "flag --strategy: \"mirroredd\" is not one of");
  ExpectBadInput(Fit(job, {"--strategy", "parameter_server"}), "needs a cluster with \"ps\" tasks");
  ExpectBadInput(Fit(job, {"--replicas", "2"}), "flag --replicas: only --strategy mirrored and central_storage");
  ExpectBadInput(Fit(job, {"--ps-closures-per-worker", "0"}),
                 "flag --ps-closures-per-worker: must be auto or in 1..64");
  ExpectBadInput(Fit(job, {"--ps-closures-per-worker", "three"}),
                 "flag --ps-closures-per-worker: not an integer: \"three\"");
  ExpectBadInput(Fit(job, {"--strategy", "mirrored", "--replicas", "0"}), "flag --replicas: must be in 1..256");
  ExpectBadInput(Fit(job, {"--communication", "mpi"}), "flag --communication: communication \"mpi\"");
  ExpectBadInput(Fit(job, {"--collective-timeout-seconds", "0"}),
                 "flag --collective-timeout-seconds: must be a positive");
  ExpectBadInput(Fit(job, {"--strategy", "mirrored", "--communication", "nccl"}),
                 "flag --communication nccl: NCCL reduces between worker processes (multi_worker_mirrored); mirrored");
  // Where NCCL cannot serve (no GPU, or a build without it), asking for it
  // is one line and exit 2, never a silent fall-back to the ring.
  auto r = Fit(t::SourceDir() + "/tests/support/data/synthetic-small.json",
               {"--strategy", "multi_worker_mirrored", "--communication", "nccl", "--epochs", "1"});
  if (r.exit_code != 0) ExpectBadInput(r, "flag --communication nccl: ");
}

// The CPU image carries tfjob-runtime-cpu (as tfjob-runtime) and
// custom_training_loop (scripts/images.sh): in a build with CUDA too, neither
// loads a CUDA, cuBLAS or NCCL library, and the runtime says it has neither.
TEST(CpuRuntimeTest, LoadsNoCudaLibraryAndSaysSo) {
  for (const std::string binary : {"tfjob-runtime-cpu", "custom_training_loop"}) {
    auto r = t::Run({"ldd", t::BinDir() + "/" + binary});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("libc.so"));  // ldd did list it
    for (const std::string lib : {"libcudart", "libcublas", "libnccl", "libcuda."}) {
      EXPECT_THAT(r.out, ::testing::Not(HasSubstr(lib))) << binary << "\n" << r.out;
    }
  }
  const std::string cpu = t::BinDir() + "/tfjob-runtime-cpu";
  auto v = t::Run({cpu, "--version"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_THAT(v.out, ::testing::MatchesRegex("tfjob-runtime-cpu [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  auto gpu =
      t::Run({cpu, "fit", "--config", Example("mnist/mlp.json"), "--data-dir", t::MnistDir(), "--device", "gpu"});
  EXPECT_EQ(gpu.exit_code, 2) << gpu.out << gpu.err;
  EXPECT_THAT(gpu.err, HasSubstr("error: flag --device gpu: this build has no CUDA support"));
  auto nccl = t::Run({cpu, "fit", "--config", t::SourceDir() + "/tests/support/data/synthetic-small.json", "--strategy",
                      "multi_worker_mirrored", "--communication", "nccl", "--epochs", "1"});
  EXPECT_EQ(nccl.exit_code, 2) << nccl.out << nccl.err;
  EXPECT_THAT(nccl.err, HasSubstr("error: flag --communication nccl: this binary has no NCCL"));
}

// The GPU build's tfjob-runtime opens cuBLAS and NCCL only when a task uses
// a GPU (common/shared_library.h), so its CPU tasks (every PS, evaluator and
// CPU worker of a GPU job) do not pay for them. The dynamic loader's own
// record of the files it opens (LD_DEBUG=files) says which were.
TEST(GpuRuntimeTest, ATaskOnTheCpuOpensNeitherCublasNorNccl) {
  const std::string runtime = t::BinDir() + "/tfjob-runtime";
  auto ldd = t::Run({"ldd", runtime});
  ASSERT_EQ(ldd.exit_code, 0) << ldd.err;
  if (ldd.out.find("libcudart") == std::string::npos) GTEST_SKIP() << "tfjob-runtime is built without CUDA";
  for (const std::string lib : {"libcublas", "libnccl"}) {
    EXPECT_THAT(ldd.out, ::testing::Not(HasSubstr(lib))) << ldd.out;  // not linked
  }
  auto r = t::Run({runtime, "fit", "--config", t::SourceDir() + "/tests/support/data/synthetic-small.json", "--epochs",
                   "1", "--device", "auto"},
                  {{"LD_DEBUG", "files"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("file=libcudart.so"));  // the record is there: cudart is linked
  for (const std::string lib : {"libcublas", "libnccl"}) {
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("file=" + lib))) << lib;
  }
}

// Single-process training checkpoints too, and a second run with the same
// directory resumes from the final checkpoint instead of training again.
TEST(FitCommandTest, SingleProcessCheckpointsAndResumes) {
  const std::string dir = t::MakeTempDir("fit-ckpt");
  const std::string job = t::SourceDir() + "/tests/support/data/synthetic-small.json";
  auto r = t::Run({t::RuntimeBinary(), "fit", "--config", job, "--checkpoint-dir", dir + "/ckpt",
                   "--checkpoint-every-steps", "30", "--summary-json", dir + "/a.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit: checkpoint " + dir + "/ckpt/ckpt-30 (step 30,"));
  EXPECT_THAT(r.out, HasSubstr("fit: checkpoint " + dir + "/ckpt/ckpt-80 (step 80, final,"));
  auto again = t::Run({t::RuntimeBinary(), "fit", "--config", job, "--checkpoint-dir", dir + "/ckpt", "--summary-json",
                       dir + "/b.json"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("fit: restored checkpoint " + dir + "/ckpt/ckpt-80 at step 80"));
  EXPECT_THAT(again.out, ::testing::Not(HasSubstr("Epoch 1/4")));
  const nlohmann::json a = nlohmann::json::parse(ReadText(dir + "/a.json"));
  const nlohmann::json b = nlohmann::json::parse(ReadText(dir + "/b.json"));
  EXPECT_EQ(a["eval_accuracy"], b["eval_accuracy"]);
  EXPECT_EQ(a["steps"], 80);
  EXPECT_EQ(b["steps"], 80);
}

TEST(EvaluatorRoleTest, BadInputIsOneLine) {
  const std::map<std::string, std::string> env{{"TF_CONFIG", EvaluatorTfConfig()}};
  ExpectBadInput(t::Run({t::RuntimeBinary(), "fit", "--config", Example("mnist/mlp.json")}, env),
                 "evaluator: flag --checkpoint-dir is required");
  ExpectBadInput(t::Run({t::RuntimeBinary(), "counter"}, env), "program \"counter\" has no evaluator role");
  const std::string dir = t::MakeTempDir("eval-noeval");
  nlohmann::json job = MlpJob();
  job["data"].erase("eval");
  ExpectBadInput(t::Run({t::RuntimeBinary(), "fit", "--config", WriteJob(dir, job), "--checkpoint-dir", dir}, env),
                 "data.eval: the evaluator needs an eval dataset");
}

// The evaluator alone over a directory another run filled: it evaluates the
// newest checkpoint, skips a damaged one for the previous good one, and ends
// on the final checkpoint with the chief's own result.
TEST(EvaluatorRoleTest, EvaluatesCheckpointsUpToTheFinalOne) {
  const std::string dir = t::MakeTempDir("eval-run");
  const std::string ckpt = dir + "/ckpt";
  auto train = t::Run({t::RuntimeBinary(),
                       "local",
                       "--ps",
                       "2",
                       "--workers",
                       "1",
                       "--",
                       "fit",
                       "--config",
                       Example("mnist/mlp.json"),
                       "--epochs",
                       "2",
                       "--data-dir",
                       t::MnistDir(),
                       "--checkpoint-dir",
                       ckpt,
                       "--checkpoint-every-steps",
                       "100",
                       "--checkpoint-keep",
                       "2",
                       "--summary-json",
                       dir + "/chief.json"});
  ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
  const nlohmann::json chief = nlohmann::json::parse(ReadText(dir + "/chief.json"));
  EXPECT_EQ(chief["recovery"]["checkpoints_written"], 4);  // steps 0, 100, 200 and the final 250
  const std::map<std::string, std::string> env{{"TF_CONFIG", EvaluatorTfConfig()}};
  const std::vector<std::string> eval{
      t::RuntimeBinary(), "fit", "--config",       Example("mnist/mlp.json"), "--data-dir", t::MnistDir(),
      "--checkpoint-dir", ckpt,  "--summary-json", dir + "/eval.json"};
  auto r = t::Run(eval, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("evaluator: checkpoint step 250 (final)"));
  nlohmann::json ev = nlohmann::json::parse(ReadText(dir + "/eval.json"));
  ASSERT_EQ(ev["evaluations"].size(), 1u) << ev.dump();
  EXPECT_EQ(ev["evaluations"][0]["eval_accuracy"].get<double>(), chief["eval_accuracy"].get<double>());

  // Damage the final checkpoint: it is never loaded, the previous one is (and
  // not being final, the evaluator keeps watching until it is killed).
  std::fstream f(ckpt + "/ckpt-250/ps-0.ckpt", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(40);
  f.put('\x7f');
  f.close();
  std::vector<std::string> bounded = eval;
  bounded.insert(bounded.end(), {"--eval-timeout-seconds", "1"});
  auto d = t::Run(bounded, env);
  EXPECT_EQ(d.exit_code, 1) << d.out << d.err;  // the final checkpoint never came
  EXPECT_THAT(d.err, HasSubstr("no new checkpoint"));
  EXPECT_THAT(d.out, HasSubstr("skipping " + ckpt + "/ckpt-250"));
  EXPECT_THAT(d.out, HasSubstr("evaluator: checkpoint step 200\n"));
  EXPECT_THAT(d.out, ::testing::Not(HasSubstr("step 250 (final)")));
}

}  // namespace
}  // namespace tfjob
