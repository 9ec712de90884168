// Semantics through the direct C++ API (no HTTP), and the store's watch
// cursors where HTTP would make the timing hard to control.
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/apiserver/resources.h"
#include "tests/support/apiserver/store.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace tfjob::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

json Obj(const std::string& api_version, const std::string& kind, const std::string& name, const json& extra = {}) {
  json o = {{"apiVersion", api_version}, {"kind", kind}, {"metadata", {{"name", name}}}};
  if (extra.is_object()) o.update(extra);
  return o;
}

json OwnerRef(const json& owner) {
  return {{"apiVersion", owner["apiVersion"]},
          {"kind", owner["kind"]},
          {"name", owner["metadata"]["name"]},
          {"uid", owner["metadata"]["uid"]},
          {"controller", true}};
}

json OwnedPod(const std::string& name, const json& owner) {
  json p = Obj("v1", "Pod", name, {{"spec", {{"containers", json::array()}}}});
  p["metadata"]["ownerReferences"] = {OwnerRef(owner)};
  return p;
}

class DirectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ApiServerDouble::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }
  json MustCreate(const std::string& resource, const std::string& ns, const json& obj) {
    auto r = server_->Create(resource, ns, obj);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : json();
  }
  std::unique_ptr<ApiServerDouble> server_;
};

TEST_F(DirectTest, ErrorsMapToStatusCodes) {
  json job = MustCreate("tfjobs", "default", Obj("kubeflow.org/v1", "TFJob", "a", {{"spec", json::object()}}));
  EXPECT_EQ(server_->Get("tfjobs", "default", "missing").status().code(), Code::kNotFound);
  EXPECT_EQ(server_->Create("tfjobs", "default", job).status().code(), Code::kInternal)
      << "resourceVersion set on create";
  json again = job;
  again["metadata"].erase("resourceVersion");
  EXPECT_EQ(server_->Create("tfjobs", "default", again).status().code(), Code::kAlreadyExists);
  json stale = job;
  json first = job;
  first["spec"]["x"] = 0;
  ASSERT_TRUE(server_->Update("tfjobs", "default", first).ok());
  json changed = stale;
  changed["spec"]["x"] = 1;
  auto conflict = server_->Update("tfjobs", "default", changed);
  EXPECT_EQ(conflict.status().code(), Code::kAborted);
  EXPECT_THAT(conflict.status().message(), ::testing::HasSubstr("409 Conflict"));
  EXPECT_EQ(server_->Create("tfjobs", "default", Obj("kubeflow.org/v1", "TFJob", "")).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(server_->Get("nosuchthings", "default", "a").status().code(), Code::kNotFound);
  EXPECT_EQ(server_->List("pods", "", "bad in (").status().code(), Code::kInvalidArgument);
  // Short and qualified names resolve.
  EXPECT_TRUE(server_->Get("tfjob", "default", "a").ok());
  EXPECT_TRUE(server_->Get("tfjobs.kubeflow.org", "default", "a").ok());
  EXPECT_TRUE(server_->Get("ns", "", "default").ok());
}

TEST_F(DirectTest, UnchangedUpdateWritesNothing) {
  json cm = MustCreate("configmaps", "default", Obj("v1", "ConfigMap", "c", {{"data", {{"k", "v"}}}}));
  uint64_t rv = server_->ResourceVersion();
  auto same = server_->Update("configmaps", "default", cm);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(server_->ResourceVersion(), rv);
  EXPECT_EQ((*same)["metadata"]["resourceVersion"], cm["metadata"]["resourceVersion"]);
  // Without a status subresource, any non-metadata change is a new generation.
  cm["data"]["k"] = "w";
  auto changed = server_->Update("configmaps", "default", cm);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ((*changed)["metadata"]["generation"], 2);
  cm = *changed;
  cm["metadata"]["labels"] = {{"a", "b"}};
  auto relabelled = server_->Update("configmaps", "default", cm);
  ASSERT_TRUE(relabelled.ok());
  EXPECT_EQ((*relabelled)["metadata"]["generation"], 2) << "metadata is not spec";
}

TEST_F(DirectTest, FinalizersHoldDeletionUntilRemoved) {
  json job = Obj("kubeflow.org/v1", "TFJob", "a", {{"spec", json::object()}});
  job["metadata"]["finalizers"] = {"kubeflow.org/cleanup"};
  job = MustCreate("tfjobs", "default", job);
  json pod = MustCreate("pods", "default", OwnedPod("a-worker-0", job));

  auto marked = server_->Delete("tfjobs", "default", "a");
  ASSERT_TRUE(marked.ok()) << marked.status();
  EXPECT_FALSE((*marked)["metadata"].value("deletionTimestamp", "").empty());
  auto still = server_->Get("tfjobs", "default", "a");
  ASSERT_TRUE(still.ok()) << "a finalizer keeps the object";
  EXPECT_TRUE(server_->Get("pods", "default", "a-worker-0").ok()) << "background cascade waits for the owner";

  // Deleting again changes nothing; adding a finalizer now is refused.
  uint64_t rv = server_->ResourceVersion();
  ASSERT_TRUE(server_->Delete("tfjobs", "default", "a").ok());
  EXPECT_EQ(server_->ResourceVersion(), rv);
  EXPECT_EQ(server_
                ->MergePatch("tfjobs", "default", "a",
                             {{"metadata", {{"finalizers", {"kubeflow.org/cleanup", "x.io/more"}}}}})
                .status()
                .code(),
            Code::kInvalidArgument);

  // Removing the last finalizer completes the deletion, and the cascade.
  auto gone = server_->MergePatch("tfjobs", "default", "a", {{"metadata", {{"finalizers", nullptr}}}});
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(server_->Get("tfjobs", "default", "a").status().code(), Code::kNotFound);
  EXPECT_EQ(server_->Get("pods", "default", "a-worker-0").status().code(), Code::kNotFound);
}

TEST_F(DirectTest, PropagationPolicies) {
  json job = MustCreate("tfjobs", "default", Obj("kubeflow.org/v1", "TFJob", "fg", {{"spec", json::object()}}));
  json pod = MustCreate("pods", "default", OwnedPod("fg-worker-0", job));
  // A grandchild goes too.
  json cm = Obj("v1", "ConfigMap", "fg-worker-0-config");
  cm["metadata"]["ownerReferences"] = {OwnerRef(pod)};
  MustCreate("configmaps", "default", cm);
  ASSERT_TRUE(server_->Delete("tfjobs", "default", "fg", "Foreground").ok());
  EXPECT_EQ(server_->List("pods", "default").value().size(), 0u);
  EXPECT_EQ(server_->List("configmaps", "default").value().size(), 0u);

  // Two owners: deleting one leaves the dependent with the other.
  json a = MustCreate("tfjobs", "default", Obj("kubeflow.org/v1", "TFJob", "a", {{"spec", json::object()}}));
  json b = MustCreate("tfjobs", "default", Obj("kubeflow.org/v1", "TFJob", "b", {{"spec", json::object()}}));
  json shared = Obj("v1", "ConfigMap", "shared");
  shared["metadata"]["ownerReferences"] = {OwnerRef(a), OwnerRef(b)};
  shared["metadata"]["ownerReferences"][1]["controller"] = false;
  MustCreate("configmaps", "default", shared);
  ASSERT_TRUE(server_->Delete("tfjobs", "default", "a").ok());
  auto left = server_->Get("configmaps", "default", "shared");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ((*left)["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ((*left)["metadata"]["ownerReferences"][0]["name"], "b");
  ASSERT_TRUE(server_->Delete("tfjobs", "default", "b").ok());
  EXPECT_EQ(server_->Get("configmaps", "default", "shared").status().code(), Code::kNotFound);

  EXPECT_EQ(server_->Delete("tfjobs", "default", "none").status().code(), Code::kNotFound);
}

TEST_F(DirectTest, DeletingANamespaceDeletesItsObjects) {
  MustCreate("namespaces", "", Obj("v1", "Namespace", "team"));
  MustCreate("pods", "team", Obj("v1", "Pod", "p", {{"spec", json::object()}}));
  MustCreate("configmaps", "team", Obj("v1", "ConfigMap", "c"));
  MustCreate("configmaps", "default", Obj("v1", "ConfigMap", "c"));
  ASSERT_TRUE(server_->Delete("namespaces", "", "team").ok());
  EXPECT_EQ(server_->List("pods", "team").value().size(), 0u);
  EXPECT_EQ(server_->List("configmaps", "team").value().size(), 0u);
  EXPECT_EQ(server_->List("configmaps", "default").value().size(), 1u);
}

TEST_F(DirectTest, CustomResourceDefinitionsRegisterResources) {
  EXPECT_EQ(server_->List("widgets", "default").status().code(), Code::kNotFound);
  json crd = {{"apiVersion", "apiextensions.k8s.io/v1"},
              {"kind", "CustomResourceDefinition"},
              {"metadata", {{"name", "widgets.example.com"}}},
              {"spec",
               {{"group", "example.com"},
                {"names", {{"kind", "Widget"}, {"plural", "widgets"}, {"shortNames", {"wd"}}}},
                {"scope", "Cluster"},
                {"versions", {{{"name", "v1alpha1"}, {"served", true}, {"storage", true}}}}}}};
  json bad = crd;
  bad["metadata"]["name"] = "wrong.example.com";
  EXPECT_EQ(server_->Create("customresourcedefinitions", "", bad).status().code(), Code::kInvalidArgument);
  json created = MustCreate("crd", "", crd);
  EXPECT_EQ(created["status"]["acceptedNames"]["listKind"], "WidgetList");
  EXPECT_EQ(created["status"]["conditions"][1]["type"], "Established");

  json w = MustCreate("wd", "ignored-for-cluster-scope", Obj("example.com/v1alpha1", "Widget", "w1"));
  EXPECT_FALSE(w["metadata"].contains("namespace"));
  EXPECT_FALSE(w.contains("status") && !w["status"].is_null());
  EXPECT_TRUE(server_->Get("widgets", "", "w1").ok());

  // Deleting the CRD deletes its objects and the resource.
  ASSERT_TRUE(server_->Delete("customresourcedefinitions", "", "widgets.example.com").ok());
  EXPECT_EQ(server_->Get("widgets", "", "w1").status().code(), Code::kNotFound);
  EXPECT_EQ(server_->Create("widgets", "", Obj("example.com/v1alpha1", "Widget", "w2")).status().code(),
            Code::kNotFound);
}

TEST_F(DirectTest, PutCreatesOrReplacesIncludingStatus) {
  json pod = Obj("v1", "Pod", "p", {{"spec", json::object()}, {"status", {{"phase", "Running"}}}});
  auto created = server_->Put("pods", "default", pod);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["status"]["phase"], "Running");
  pod["status"]["phase"] = "Succeeded";
  pod["metadata"]["labels"] = {{"done", "yes"}};
  auto replaced = server_->Put("pods", "default", pod);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ((*replaced)["status"]["phase"], "Succeeded");
  EXPECT_EQ((*replaced)["metadata"]["labels"]["done"], "yes");
  EXPECT_EQ((*replaced)["metadata"]["uid"], (*created)["metadata"]["uid"]);
}

TEST_F(DirectTest, WaitForWakesOnWrites) {
  const pid_t waiter = gettid();
  std::thread writer([&] {
    // Writes once the test thread sleeps inside WaitFor: the write wakes it.
    (void)WaitUntilBlocked(waiter);
    (void)server_->Create("configmaps", "default", Obj("v1", "ConfigMap", "late"));
  });
  EXPECT_TRUE(server_->WaitFor([&] { return server_->Get("configmaps", "default", "late").ok(); }, 10s));
  writer.join();
  EXPECT_FALSE(server_->WaitFor([] { return false; }, 20ms));
}

TEST_F(DirectTest, KubeconfigPointsHere) {
  std::string dir = MakeTempDir("apiserver-kubeconfig");
  ASSERT_TRUE(server_->WriteKubeconfig(dir + "/config", "team").ok());
  YAML::Node cfg = YAML::LoadFile(dir + "/config");
  EXPECT_EQ(cfg["clusters"][0]["cluster"]["server"].as<std::string>(), server_->url());
  EXPECT_EQ(cfg["contexts"][0]["context"]["namespace"].as<std::string>(), "team");
  EXPECT_EQ(cfg["current-context"].as<std::string>(), "double");
}

// ---- Store-level -----------------------------------------------------------

TEST(StoreTest, SlowWatcherFallsOutOfTheWindow) {
  apiserver::Store::Options o;
  o.compaction_window = 2;
  apiserver::Store store(o);
  auto cms = *store.Resolve("configmaps");
  apiserver::WatchCursor cursor;
  cursor.resource_id = cms.id();
  auto start = store.StartWatch(&cursor, std::to_string(store.resource_version()), false);
  ASSERT_TRUE(start.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store.Create(cms, "default", Obj("v1", "ConfigMap", "c" + std::to_string(i)), false).ok());
  }
  std::vector<apiserver::WatchEvent> events;
  EXPECT_EQ(store.Wait(&cursor, std::chrono::steady_clock::now() + 1s, &events),
            apiserver::Store::WaitOutcome::kExpired);
  store.EndWatch(&cursor);
  EXPECT_EQ(store.ActiveWatches(""), 0);
}

TEST(StoreTest, WaitReturnsOnDropAndShutdown) {
  apiserver::Store store({});
  apiserver::WatchCursor cursor;
  cursor.resource_id = "pods";
  ASSERT_TRUE(store.StartWatch(&cursor, "", false).ok());
  std::vector<apiserver::WatchEvent> events;
  EXPECT_EQ(store.Wait(&cursor, std::chrono::steady_clock::now() + 10ms, &events),
            apiserver::Store::WaitOutcome::kTimeout);
  const pid_t waiter = gettid();
  std::thread t([&] {
    // Drops once the test thread sleeps inside Wait: the drop wakes it.
    (void)WaitUntilBlocked(waiter);
    store.DropWatches();
  });
  EXPECT_EQ(store.Wait(&cursor, std::chrono::steady_clock::now() + 10s, &events),
            apiserver::Store::WaitOutcome::kDropped);
  t.join();
  store.Shutdown();
  EXPECT_EQ(store.Wait(&cursor, std::chrono::steady_clock::now() + 10s, &events),
            apiserver::Store::WaitOutcome::kShutdown);
  store.EndWatch(&cursor);
}

// YAML scalars as JSON: booleans and integers typed, the rest strings.
json ToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = ToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(ToJson(e));
      return a;
    }
    case YAML::NodeType::Scalar: {
      std::string s = n.as<std::string>();
      if (n.Tag() != "!") {
        if (s == "true" || s == "false") return s == "true";
        if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 10) return std::stoi(s);
      }
      return s;
    }
    default: return nullptr;
  }
}

TEST(TfJobCrdTest, BuiltinDefinitionMatchesCrdsDirectory) {
  YAML::Node node = YAML::LoadFile(SourceDir() + "/crds/kubeflow.org_tfjobs.yaml");
  auto from_file = apiserver::ResourcesFromCrd(ToJson(node));
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto builtin = apiserver::ResourcesFromCrd(apiserver::TfJobCrd());
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  ASSERT_EQ(from_file->size(), builtin->size());
  for (size_t i = 0; i < builtin->size(); ++i) {
    const auto& a = (*from_file)[i];
    const auto& b = (*builtin)[i];
    EXPECT_EQ(a.id(), b.id());
    EXPECT_EQ(a.version, b.version);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.list_kind, b.list_kind);
    EXPECT_EQ(a.singular, b.singular);
    EXPECT_EQ(a.namespaced, b.namespaced);
    EXPECT_EQ(a.has_status, b.has_status);
    EXPECT_EQ(a.short_names, b.short_names);
    EXPECT_EQ(a.categories, b.categories);
    ASSERT_EQ(a.columns.size(), b.columns.size());
    for (size_t c = 0; c < a.columns.size(); ++c) {
      EXPECT_EQ(a.columns[c].name, b.columns[c].name);
      EXPECT_EQ(a.columns[c].type, b.columns[c].type);
      EXPECT_EQ(a.columns[c].json_path, b.columns[c].json_path);
    }
  }
}

}  // namespace
}  // namespace tfjob::testing
