// The API server double over real HTTP, driven with cpprestsdk's http_client.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/apiserver/tests/test_client.h"
#include "tests/support/subprocess.h"

namespace tfjob::testing {
namespace {

using apiserver_test::Client;
using apiserver_test::Q;
using apiserver_test::Response;
using apiserver_test::WatchStream;
using nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kTfJobs = "/apis/kubeflow.org/v1/namespaces/default/tfjobs";
const std::string kPods = "/api/v1/namespaces/default/pods";
const std::string kServices = "/api/v1/namespaces/default/services";
const std::string kConfigMaps = "/api/v1/namespaces/default/configmaps";

json TfJob(const std::string& name, const json& labels = json::object()) {
  json container = {{"name", "tensorflow"}, {"image", "tf:1"}};
  json worker = {{"replicas", 2}, {"template", {{"spec", {{"containers", json::array({container})}}}}}};
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"spec", {{"tfReplicaSpecs", {{"Worker", worker}}}}}};
}

json Pod(const std::string& name, const json& labels = json::object(), const json& owner = nullptr) {
  json p = {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"labels", labels}}},
            {"spec", {{"containers", {{{"name", "tensorflow"}, {"image", "tf:1"}}}}}}};
  if (!owner.is_null()) {
    p["metadata"]["ownerReferences"] = {{{"apiVersion", owner["apiVersion"]},
                                         {"kind", owner["kind"]},
                                         {"name", owner["metadata"]["name"]},
                                         {"uid", owner["metadata"]["uid"]},
                                         {"controller", true},
                                         {"blockOwnerDeletion", true}}};
  }
  return p;
}

json ConfigMap(const std::string& name, const json& data = json::object()) {
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}, {"data", data}};
}

std::string Rv(const json& obj) { return obj["metadata"].value("resourceVersion", ""); }

// A k8s Status failure with the given code and reason.
void ExpectStatus(const Response& r, int code, const std::string& reason) {
  EXPECT_EQ(r.code, code) << r.text;
  ASSERT_TRUE(r.body.is_object()) << r.text;
  EXPECT_EQ(r.body.value("kind", ""), "Status") << r.text;
  EXPECT_EQ(r.body.value("apiVersion", ""), "v1") << r.text;
  EXPECT_EQ(r.body.value("status", ""), "Failure") << r.text;
  EXPECT_EQ(r.body.value("reason", ""), reason) << r.text;
  EXPECT_EQ(r.body.value("code", 0), code) << r.text;
}

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart({}); }

  void Restart(ApiServerDouble::Options options) {
    client_.reset();
    server_.reset();
    auto s = ApiServerDouble::Start(options);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    client_ = std::make_unique<Client>(server_->url(), options.bearer_token);
  }

  json MustCreate(const std::string& collection, const json& obj) {
    Response r = client_->Post(collection, obj);
    EXPECT_EQ(r.code, 201) << r.text;
    return r.body;
  }

  std::unique_ptr<WatchStream> Watch(const std::string& collection, const std::string& query) {
    return std::make_unique<WatchStream>(server_->url(), collection + "?watch=1" + (query.empty() ? "" : "&" + query));
  }

  std::unique_ptr<ApiServerDouble> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(HttpTest, DiscoveryDescribesServedResources) {
  Response version = client_->Get("/version");
  ASSERT_EQ(version.code, 200);
  EXPECT_EQ(version.body["gitVersion"], "v1.30.0");
  EXPECT_EQ(version.body["major"], "1");
  EXPECT_EQ(version.body["minor"], "30");

  Response api = client_->Get("/api");
  ASSERT_EQ(api.code, 200);
  EXPECT_EQ(api.body["kind"], "APIVersions");
  EXPECT_EQ(api.body["versions"], json({"v1"}));

  Response core = client_->Get("/api/v1");
  ASSERT_EQ(core.code, 200);
  EXPECT_EQ(core.body["kind"], "APIResourceList");
  EXPECT_EQ(core.body["groupVersion"], "v1");
  std::map<std::string, json> by_name;
  for (const auto& r : core.body["resources"]) by_name[r["name"]] = r;
  for (const char* name : {"pods", "pods/status", "services", "events", "configmaps", "namespaces"}) {
    EXPECT_TRUE(by_name.count(name)) << name;
  }
  EXPECT_EQ(by_name["pods"]["kind"], "Pod");
  EXPECT_EQ(by_name["pods"]["shortNames"], json({"po"}));
  EXPECT_EQ(by_name["namespaces"]["namespaced"], false);

  Response groups = client_->Get("/apis");
  ASSERT_EQ(groups.code, 200);
  EXPECT_EQ(groups.body["kind"], "APIGroupList");
  std::set<std::string> names;
  for (const auto& g : groups.body["groups"]) {
    names.insert(g["name"].get<std::string>());
    EXPECT_EQ(g["preferredVersion"]["groupVersion"], g["versions"][0]["groupVersion"]);
  }
  for (const char* g : {"kubeflow.org", "coordination.k8s.io", "apiextensions.k8s.io", "events.k8s.io"}) {
    EXPECT_TRUE(names.count(g)) << g;
  }

  Response group = client_->Get("/apis/kubeflow.org");
  ASSERT_EQ(group.code, 200);
  EXPECT_EQ(group.body["kind"], "APIGroup");
  EXPECT_EQ(group.body["preferredVersion"]["version"], "v1");

  Response kubeflow = client_->Get("/apis/kubeflow.org/v1");
  ASSERT_EQ(kubeflow.code, 200);
  EXPECT_EQ(kubeflow.body["groupVersion"], "kubeflow.org/v1");
  ASSERT_EQ(kubeflow.body["resources"].size(), 2u) << kubeflow.text;
  const json& tfjobs = kubeflow.body["resources"][0];
  EXPECT_EQ(tfjobs["name"], "tfjobs");
  EXPECT_EQ(tfjobs["singularName"], "tfjob");
  EXPECT_EQ(tfjobs["kind"], "TFJob");
  EXPECT_EQ(tfjobs["namespaced"], true);
  EXPECT_THAT(tfjobs["verbs"].get<std::vector<std::string>>(),
              ::testing::IsSupersetOf({"create", "get", "list", "watch", "update", "patch", "delete"}));
  EXPECT_EQ(kubeflow.body["resources"][1]["name"], "tfjobs/status");

  EXPECT_EQ(client_->Get("/apis/nope.example.com/v1").code, 404);
  Response openapi = client_->Get("/openapi/v3");
  ASSERT_EQ(openapi.code, 200);
  ASSERT_TRUE(openapi.body["paths"].contains("apis/kubeflow.org/v1")) << openapi.text;
  std::string gv_url = openapi.body["paths"]["apis/kubeflow.org/v1"]["serverRelativeURL"];
  Response gv = client_->Get(gv_url);
  ASSERT_EQ(gv.code, 200) << gv_url;
  EXPECT_TRUE(gv.body["paths"].contains("/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{name}"));
  EXPECT_EQ(client_->Get("/healthz").text, "ok");
}

TEST_F(HttpTest, CreateGetListSetServerFields) {
  Response created = client_->Post(kTfJobs, TfJob("mnist"));
  ASSERT_EQ(created.code, 201) << created.text;
  const json& meta = created.body["metadata"];
  EXPECT_EQ(meta["name"], "mnist");
  EXPECT_EQ(meta["namespace"], "default");
  EXPECT_EQ(meta["generation"], 1);
  EXPECT_EQ(meta["uid"].get<std::string>().size(), 36u);
  EXPECT_FALSE(meta.value("creationTimestamp", "").empty());
  EXPECT_EQ(Rv(created.body), std::to_string(server_->ResourceVersion()));
  EXPECT_FALSE(created.body.contains("status")) << "status is the status subresource's, not create's";

  Response got = client_->Get(kTfJobs + "/mnist");
  ASSERT_EQ(got.code, 200);
  EXPECT_EQ(got.body, created.body);

  Response list = client_->Get(kTfJobs);
  ASSERT_EQ(list.code, 200);
  EXPECT_EQ(list.body["kind"], "TFJobList");
  EXPECT_EQ(list.body["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(list.body["metadata"]["resourceVersion"], std::to_string(server_->ResourceVersion()));
  ASSERT_EQ(list.body["items"].size(), 1u);
  EXPECT_EQ(list.body["items"][0], created.body);

  // The direct accessor sees what HTTP wrote.
  auto direct = server_->Get("tfjobs", "default", "mnist");
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(*direct, created.body);

  // A namespace that was never created works too.
  EXPECT_EQ(client_->Post("/apis/kubeflow.org/v1/namespaces/team-a/tfjobs", TfJob("mnist")).code, 201);
  Response all = client_->Get("/apis/kubeflow.org/v1/tfjobs");
  ASSERT_EQ(all.code, 200);
  EXPECT_EQ(all.body["items"].size(), 2u);
}

TEST_F(HttpTest, CreateConflictsAndGenerateName) {
  ASSERT_EQ(client_->Post(kTfJobs, TfJob("mnist")).code, 201);
  Response again = client_->Post(kTfJobs, TfJob("mnist"));
  ExpectStatus(again, 409, "AlreadyExists");
  EXPECT_EQ(again.body["details"]["name"], "mnist");
  EXPECT_EQ(again.body["details"]["group"], "kubeflow.org");
  EXPECT_THAT(again.body["message"].get<std::string>(), HasSubstr("already exists"));

  json gen = ConfigMap("");
  gen["metadata"].erase("name");
  gen["metadata"]["generateName"] = "cfg-";
  Response a = client_->Post(kConfigMaps, gen);
  Response b = client_->Post(kConfigMaps, gen);
  ASSERT_EQ(a.code, 201) << a.text;
  ASSERT_EQ(b.code, 201) << b.text;
  std::string na = a.body["metadata"]["name"], nb = b.body["metadata"]["name"];
  EXPECT_EQ(na.rfind("cfg-", 0), 0u);
  EXPECT_EQ(na.size(), 9u);
  EXPECT_NE(na, nb);
}

TEST_F(HttpTest, MalformedOrInvalidBodiesAreRejected) {
  Response bad_json = client_->Do("POST", kTfJobs, "{\"metadata\": ");
  ExpectStatus(bad_json, 400, "BadRequest");
  ExpectStatus(client_->Do("POST", kTfJobs, "[1,2,3]"), 400, "BadRequest");
  ExpectStatus(client_->Do("POST", kTfJobs, std::string(5000, '[') + std::string(5000, ']')), 400, "BadRequest");

  json wrong_kind = TfJob("a");
  wrong_kind["kind"] = "PyTorchJob";
  ExpectStatus(client_->Post(kTfJobs, wrong_kind), 400, "BadRequest");
  json wrong_version = TfJob("a");
  wrong_version["apiVersion"] = "kubeflow.org/v2";
  ExpectStatus(client_->Post(kTfJobs, wrong_version), 400, "BadRequest");
  json wrong_ns = TfJob("a");
  wrong_ns["metadata"]["namespace"] = "other";
  ExpectStatus(client_->Post(kTfJobs, wrong_ns), 400, "BadRequest");

  json no_name = TfJob("");
  no_name["metadata"].erase("name");
  Response invalid = client_->Post(kTfJobs, no_name);
  ExpectStatus(invalid, 422, "Invalid");
  ASSERT_TRUE(invalid.body["details"]["causes"].is_array());
  EXPECT_EQ(invalid.body["details"]["causes"][0]["field"], "metadata.name");
  EXPECT_EQ(invalid.body["details"]["causes"][0]["reason"], "FieldValueRequired");

  ExpectStatus(client_->Post(kTfJobs, TfJob("Upper_Case")), 422, "Invalid");
  ExpectStatus(client_->Post(kTfJobs, TfJob("ok", {{"bad key!", "v"}})), 422, "Invalid");
  ExpectStatus(client_->Post(kTfJobs, TfJob("ok", {{"k", std::string(64, 'v')}})), 422, "Invalid");
  json labels_not_strings = TfJob("ok");
  labels_not_strings["metadata"]["labels"] = {{"k", 1}};
  ExpectStatus(client_->Post(kTfJobs, labels_not_strings), 400, "BadRequest");
  json with_rv = TfJob("ok");
  with_rv["metadata"]["resourceVersion"] = "12";
  ExpectStatus(client_->Post(kTfJobs, with_rv), 500, "InternalError");
  // Services are DNS-1035 labels: no leading digit.
  json svc = {{"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", {{"name", "1svc"}}}, {"spec", json::object()}};
  ExpectStatus(client_->Post(kServices, svc), 422, "Invalid");

  EXPECT_EQ(server_->List("tfjobs", "").value().size(), 0u) << "no rejected request may write";
}

TEST_F(HttpTest, UpdateNeedsCurrentResourceVersion) {
  json job = MustCreate(kTfJobs, TfJob("mnist"));
  std::string rv1 = Rv(job);
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3;
  Response ok = client_->Put(kTfJobs + "/mnist", job);
  ASSERT_EQ(ok.code, 200) << ok.text;
  EXPECT_NE(Rv(ok.body), rv1);
  EXPECT_EQ(ok.body["metadata"]["generation"], 2);

  // The same body again carries the old resourceVersion: stale.
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4;
  Response stale = client_->Put(kTfJobs + "/mnist", job);
  ExpectStatus(stale, 409, "Conflict");
  EXPECT_THAT(stale.body["message"].get<std::string>(), HasSubstr("the object has been modified"));
  EXPECT_EQ(server_->Get("tfjobs", "default", "mnist").value()["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 3);

  // No resourceVersion: an unconditional update.
  job["metadata"].erase("resourceVersion");
  Response unconditional = client_->Put(kTfJobs + "/mnist", job);
  ASSERT_EQ(unconditional.code, 200) << unconditional.text;
  EXPECT_EQ(unconditional.body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 4);

  // Server-owned fields survive what the client sends.
  json tamper = unconditional.body;
  tamper["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z";
  tamper["metadata"]["generation"] = 99;
  Response kept = client_->Put(kTfJobs + "/mnist", tamper);
  ASSERT_EQ(kept.code, 200);
  EXPECT_EQ(kept.body["metadata"]["creationTimestamp"], unconditional.body["metadata"]["creationTimestamp"]);
  EXPECT_EQ(kept.body["metadata"]["generation"], unconditional.body["metadata"]["generation"]);

  ExpectStatus(client_->Put(kTfJobs + "/absent", TfJob("absent")), 404, "NotFound");
  ExpectStatus(client_->Put(kTfJobs + "/mnist", TfJob("other")), 400, "BadRequest");
}

TEST_F(HttpTest, StatusSubresourceIsIsolatedFromSpec) {
  json job = MustCreate(kTfJobs, TfJob("mnist"));
  const json running = {{"conditions", {{{"type", "Running"}, {"status", "True"}}}}};

  // Status through the main resource is ignored; spec through it is not.
  json main = job;
  main["status"] = running;
  main["spec"]["runPolicy"] = {{"backoffLimit", 3}};
  Response r1 = client_->Put(kTfJobs + "/mnist", main);
  ASSERT_EQ(r1.code, 200) << r1.text;
  EXPECT_FALSE(r1.body.contains("status"));
  EXPECT_EQ(r1.body["spec"]["runPolicy"]["backoffLimit"], 3);
  EXPECT_EQ(r1.body["metadata"]["generation"], 2);

  // Spec through /status is ignored; status is written; generation stays.
  json via_status = r1.body;
  via_status["status"] = running;
  via_status["spec"]["runPolicy"]["backoffLimit"] = 7;
  via_status["metadata"]["labels"] = {{"sneaky", "yes"}};
  Response r2 = client_->Put(kTfJobs + "/mnist/status", via_status);
  ASSERT_EQ(r2.code, 200) << r2.text;
  EXPECT_EQ(r2.body["status"], running);
  EXPECT_EQ(r2.body["spec"]["runPolicy"]["backoffLimit"], 3);
  EXPECT_EQ(r2.body["metadata"]["generation"], 2);
  EXPECT_FALSE(r2.body["metadata"]["labels"].contains("sneaky"));
  EXPECT_NE(Rv(r2.body), Rv(r1.body));

  // A status PUT with a stale resourceVersion conflicts too.
  ExpectStatus(client_->Put(kTfJobs + "/mnist/status", via_status), 409, "Conflict");

  // Merge patch on /status.
  Response r3 = client_->Patch(kTfJobs + "/mnist/status",
                               {{"status", {{"startTime", "2024-01-01T00:00:00Z"}}}, {"spec", nullptr}});
  ASSERT_EQ(r3.code, 200) << r3.text;
  EXPECT_EQ(r3.body["status"]["startTime"], "2024-01-01T00:00:00Z");
  EXPECT_TRUE(r3.body.contains("spec"));
  EXPECT_EQ(r3.body["metadata"]["generation"], 2);

  // Writing the same status again changes nothing, not even the version.
  uint64_t before = server_->ResourceVersion();
  Response r4 = client_->Put(kTfJobs + "/mnist/status", r3.body);
  ASSERT_EQ(r4.code, 200) << r4.text;
  EXPECT_EQ(server_->ResourceVersion(), before);

  // Resources without a status subresource have no /status.
  MustCreate(kConfigMaps, ConfigMap("c"));
  EXPECT_EQ(client_->Get(kConfigMaps + "/c/status").code, 404);
}

TEST_F(HttpTest, PatchTypes) {
  MustCreate(kTfJobs, TfJob("mnist"));
  Response merge = client_->Patch(kTfJobs + "/mnist", {{"metadata", {{"labels", {{"team", "ml"}}}}},
                                                       {"spec", {{"runPolicy", {{"cleanPodPolicy", "All"}}}}}});
  ASSERT_EQ(merge.code, 200) << merge.text;
  EXPECT_EQ(merge.body["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ(merge.body["spec"]["runPolicy"]["cleanPodPolicy"], "All");
  EXPECT_EQ(merge.body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2) << "merge keeps what the patch omits";
  EXPECT_EQ(merge.body["metadata"]["generation"], 2);

  // null deletes a key (RFC 7386).
  Response removed = client_->Patch(kTfJobs + "/mnist", {{"spec", {{"runPolicy", nullptr}}}});
  ASSERT_EQ(removed.code, 200);
  EXPECT_FALSE(removed.body["spec"].contains("runPolicy"));

  // A resourceVersion in the patch is a precondition.
  ExpectStatus(client_->Patch(kTfJobs + "/mnist", {{"metadata", {{"resourceVersion", "1"}}}}), 409, "Conflict");

  // JSON patch (RFC 6902), including a failing test op.
  Response jp =
      client_->Patch(kTfJobs + "/mnist",
                     json::array({{{"op", "replace"}, {"path", "/spec/tfReplicaSpecs/Worker/replicas"}, {"value", 5}}}),
                     "application/json-patch+json");
  ASSERT_EQ(jp.code, 200) << jp.text;
  EXPECT_EQ(jp.body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 5);
  ExpectStatus(
      client_->Patch(kTfJobs + "/mnist",
                     json::array({{{"op", "test"}, {"path", "/spec/tfReplicaSpecs/Worker/replicas"}, {"value", 1}}}),
                     "application/json-patch+json"),
      422, "Invalid");

  // Strategic merge patch: custom resources refuse it, as k8s does; built-ins
  // take it (treated as a merge patch, directives dropped).
  ExpectStatus(client_->Patch(kTfJobs + "/mnist", {{"spec", json::object()}}, "application/strategic-merge-patch+json"),
               415, "UnsupportedMediaType");
  MustCreate(kPods, Pod("p"));
  Response smp = client_->Patch(kPods + "/p", {{"metadata", {{"labels", {{"a", "b"}}}}}, {"$retainKeys", {"x"}}},
                                "application/strategic-merge-patch+json");
  ASSERT_EQ(smp.code, 200) << smp.text;
  EXPECT_EQ(smp.body["metadata"]["labels"]["a"], "b");
  EXPECT_FALSE(smp.body.contains("$retainKeys"));

  ExpectStatus(client_->Patch(kTfJobs + "/mnist", {{"x", 1}}, "application/apply-patch+yaml"), 415,
               "UnsupportedMediaType");
  ExpectStatus(client_->Patch(kTfJobs + "/absent", {{"x", 1}}), 404, "NotFound");
  ExpectStatus(client_->Patch(kTfJobs + "/mnist", {{"metadata", {{"name", "renamed"}}}}), 400, "BadRequest");
}

TEST_F(HttpTest, DeleteReturnsObjectThenNotFound) {
  json job = MustCreate(kTfJobs, TfJob("mnist"));
  Response del = client_->Delete(kTfJobs + "/mnist");
  ASSERT_EQ(del.code, 200) << del.text;
  EXPECT_EQ(del.body["metadata"]["uid"], job["metadata"]["uid"]);
  ExpectStatus(client_->Get(kTfJobs + "/mnist"), 404, "NotFound");
  Response again = client_->Delete(kTfJobs + "/mnist");
  ExpectStatus(again, 404, "NotFound");
  EXPECT_EQ(again.body["details"]["name"], "mnist");
  EXPECT_EQ(again.body["details"]["kind"], "tfjobs");

  // Preconditions in DeleteOptions.
  json job2 = MustCreate(kTfJobs, TfJob("second"));
  ExpectStatus(client_->Delete(kTfJobs + "/second", {{"preconditions", {{"uid", "not-the-uid"}}}}), 409, "Conflict");
  EXPECT_EQ(client_->Delete(kTfJobs + "/second", {{"preconditions", {{"uid", job2["metadata"]["uid"]}}}}).code, 200);

  // dryRun deletes nothing.
  MustCreate(kTfJobs, TfJob("third"));
  EXPECT_EQ(client_->Delete(kTfJobs + "/third?dryRun=All").code, 200);
  EXPECT_EQ(client_->Get(kTfJobs + "/third").code, 200);
}

TEST_F(HttpTest, DeleteCascadesToOwnedObjects) {
  json job = MustCreate(kTfJobs, TfJob("mnist"));
  json other = MustCreate(kTfJobs, TfJob("other"));
  for (int i = 0; i < 2; ++i) {
    MustCreate(kPods, Pod("mnist-worker-" + std::to_string(i), {{"job", "mnist"}}, job));
    json svc = Pod("mnist-worker-" + std::to_string(i), {}, job);
    svc["kind"] = "Service";
    svc["spec"] = {{"clusterIP", "None"}};
    MustCreate(kServices, svc);
  }
  MustCreate(kPods, Pod("other-worker-0", {}, other));
  MustCreate(kPods, Pod("unowned"));
  // Ownership does not cross namespaces.
  json elsewhere = Pod("mnist-worker-0", {}, job);
  MustCreate("/api/v1/namespaces/elsewhere/pods", elsewhere);

  auto pods = Watch(kPods, "resourceVersion=" + std::to_string(server_->ResourceVersion()));
  ASSERT_EQ(pods->code(), 200);
  ASSERT_EQ(client_->Delete(kTfJobs + "/mnist", {{"propagationPolicy", "Background"}}).code, 200);

  std::set<std::string> deleted;
  for (int i = 0; i < 2; ++i) {
    auto ev = pods->NextNonBookmark();
    ASSERT_TRUE(ev) << "DELETED event " << i;
    EXPECT_EQ((*ev)["type"], "DELETED");
    deleted.insert((*ev)["object"]["metadata"]["name"].get<std::string>());
  }
  EXPECT_EQ(deleted, (std::set<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  auto left = server_->List("pods", "default");
  ASSERT_TRUE(left.ok());
  std::set<std::string> names;
  for (const auto& p : *left) names.insert(p["metadata"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"other-worker-0", "unowned"}));
  EXPECT_EQ(server_->List("services", "default").value().size(), 0u);
  EXPECT_EQ(server_->List("pods", "elsewhere").value().size(), 1u);

  // Orphan: the dependents stay and lose the reference.
  ASSERT_EQ(client_->Delete(kTfJobs + "/other?propagationPolicy=Orphan").code, 200);
  auto orphan = server_->Get("pods", "default", "other-worker-0");
  ASSERT_TRUE(orphan.ok());
  EXPECT_FALSE((*orphan)["metadata"].contains("ownerReferences"));

  ExpectStatus(client_->Delete(kPods + "/unowned?propagationPolicy=Sideways"), 422, "Invalid");
}

TEST_F(HttpTest, LabelAndFieldSelectorsFilterLists) {
  MustCreate(kPods, Pod("a", {{"app", "tf"}, {"role", "worker"}, {"index", "0"}}));
  MustCreate(kPods, Pod("b", {{"app", "tf"}, {"role", "ps"}, {"index", "1"}}));
  MustCreate(kPods, Pod("c", {{"app", "web"}}));
  MustCreate(kPods, Pod("d"));
  auto names = [&](const std::string& query) {
    Response r = client_->Get(kPods + "?" + query);
    EXPECT_EQ(r.code, 200) << query << ": " << r.text;
    std::vector<std::string> out;
    for (const auto& p : r.body.value("items", json::array())) out.push_back(p["metadata"]["name"]);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names("labelSelector=" + Q("app=tf")), (V{"a", "b"}));
  EXPECT_EQ(names("labelSelector=" + Q("app==tf,role=ps")), (V{"b"}));
  EXPECT_EQ(names("labelSelector=" + Q("app!=tf")), (V{"c", "d"}));
  EXPECT_EQ(names("labelSelector=" + Q("role in (ps, worker)")), (V{"a", "b"}));
  EXPECT_EQ(names("labelSelector=" + Q("role notin (ps)")), (V{"a", "c", "d"}));
  EXPECT_EQ(names("labelSelector=" + Q("app")), (V{"a", "b", "c"}));
  EXPECT_EQ(names("labelSelector=" + Q("!app")), (V{"d"}));
  EXPECT_EQ(names("labelSelector=" + Q("index>0")), (V{"b"}));
  EXPECT_EQ(names("fieldSelector=" + Q("metadata.name=c")), (V{"c"}));
  EXPECT_EQ(names("fieldSelector=" + Q("metadata.name!=c,metadata.namespace=default")), (V{"a", "b", "d"}));
  EXPECT_EQ(names("fieldSelector=" + Q("status.phase=Pending") + "&labelSelector=" + Q("app=tf")), (V{"a", "b"}));
  ExpectStatus(client_->Get(kPods + "?labelSelector=" + Q("role in (ps")), 400, "BadRequest");
  ExpectStatus(client_->Get(kPods + "?fieldSelector=" + Q("spec.containers=x")), 400, "BadRequest");

  // Pagination: limit and continue.
  Response page1 = client_->Get(kPods + "?limit=3");
  ASSERT_EQ(page1.code, 200);
  ASSERT_EQ(page1.body["items"].size(), 3u);
  std::string token = page1.body["metadata"].value("continue", "");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(page1.body["metadata"]["remainingItemCount"], 1);
  Response page2 = client_->Get(kPods + "?limit=3&continue=" + Q(token));
  ASSERT_EQ(page2.code, 200) << page2.text;
  ASSERT_EQ(page2.body["items"].size(), 1u);
  EXPECT_EQ(page2.body["items"][0]["metadata"]["name"], "d");
  EXPECT_FALSE(page2.body["metadata"].contains("continue"));
  ExpectStatus(client_->Get(kPods + "?continue=garbage"), 400, "BadRequest");
  server_->CompactNow();
  MustCreate(kConfigMaps, ConfigMap("bump"));
  server_->CompactNow();
  ExpectStatus(client_->Get(kPods + "?limit=3&continue=" + Q(token)), 410, "Expired");
}

TEST_F(HttpTest, WatchReplaysFromResourceVersion) {
  json a = MustCreate(kTfJobs, TfJob("a"));
  json b = MustCreate(kTfJobs, TfJob("b"));
  json a2 = client_->Patch(kTfJobs + "/a", {{"metadata", {{"labels", {{"x", "y"}}}}}}).body;

  // From a's version: b's creation and a's change, in order.
  auto w = Watch(kTfJobs, "resourceVersion=" + Rv(a));
  ASSERT_EQ(w->code(), 200);
  auto e1 = w->NextNonBookmark();
  auto e2 = w->NextNonBookmark();
  ASSERT_TRUE(e1 && e2);
  EXPECT_EQ((*e1)["type"], "ADDED");
  EXPECT_EQ((*e1)["object"], b);
  EXPECT_EQ((*e2)["type"], "MODIFIED");
  EXPECT_EQ((*e2)["object"], a2);

  // Then live events.
  ASSERT_EQ(client_->Delete(kTfJobs + "/b").code, 200);
  auto e3 = w->NextNonBookmark();
  ASSERT_TRUE(e3);
  EXPECT_EQ((*e3)["type"], "DELETED");
  EXPECT_EQ((*e3)["object"]["metadata"]["name"], "b");
  EXPECT_EQ(Rv((*e3)["object"]), std::to_string(server_->ResourceVersion())) << "deletion has its own version";

  // No resourceVersion: the current state as ADDED events first.
  auto fresh = Watch(kTfJobs, "");
  auto s1 = fresh->NextNonBookmark();
  ASSERT_TRUE(s1);
  EXPECT_EQ((*s1)["type"], "ADDED");
  EXPECT_EQ((*s1)["object"]["metadata"]["name"], "a");
  EXPECT_FALSE(fresh->Next(200ms)) << "only one object exists";

  // A single object: /watch/ path form.
  auto one = std::make_unique<WatchStream>(server_->url(), "/apis/kubeflow.org/v1/watch/namespaces/default/tfjobs/a");
  auto o1 = one->NextNonBookmark();
  ASSERT_TRUE(o1);
  EXPECT_EQ((*o1)["object"]["metadata"]["name"], "a");

  // Cluster-wide watch sees other namespaces.
  auto all = std::make_unique<WatchStream>(server_->url(), "/apis/kubeflow.org/v1/tfjobs?watch=true&resourceVersion=" +
                                                               std::to_string(server_->ResourceVersion()));
  MustCreate("/apis/kubeflow.org/v1/namespaces/team-b/tfjobs", TfJob("c"));
  auto c1 = all->NextNonBookmark();
  ASSERT_TRUE(c1);
  EXPECT_EQ((*c1)["object"]["metadata"]["namespace"], "team-b");

  // A version from the future is refused, in the stream.
  auto future = Watch(kTfJobs, "resourceVersion=999999");
  auto err = future->Next();
  ASSERT_TRUE(err);
  EXPECT_EQ((*err)["type"], "ERROR");
  EXPECT_EQ((*err)["object"]["code"], 504);
  EXPECT_EQ(client_->Get(kTfJobs + "?watch=1&resourceVersion=abc").code, 400);
}

TEST_F(HttpTest, WatchAppliesLabelSelectorToTransitions) {
  MustCreate(kPods, Pod("p", {{"role", "worker"}}));
  auto w =
      Watch(kPods, "labelSelector=" + Q("role=ps") + "&resourceVersion=" + std::to_string(server_->ResourceVersion()));
  MustCreate(kPods, Pod("q", {{"role", "worker"}}));  // never matches
  // Starts matching: ADDED; changes while matching: MODIFIED; stops: DELETED.
  ASSERT_EQ(client_->Patch(kPods + "/p", {{"metadata", {{"labels", {{"role", "ps"}}}}}}).code, 200);
  ASSERT_EQ(client_->Patch(kPods + "/p", {{"metadata", {{"annotations", {{"a", "1"}}}}}}).code, 200);
  ASSERT_EQ(client_->Patch(kPods + "/p", {{"metadata", {{"labels", {{"role", "worker"}}}}}}).code, 200);
  std::vector<std::string> types;
  for (int i = 0; i < 3; ++i) {
    auto ev = w->NextNonBookmark();
    ASSERT_TRUE(ev) << i;
    EXPECT_EQ((*ev)["object"]["metadata"]["name"], "p");
    types.push_back((*ev)["type"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED"}));
  EXPECT_FALSE(w->NextNonBookmark(200ms)) << "q never matched";
}

TEST_F(HttpTest, BookmarksCarryOnlyTheResourceVersion) {
  ApiServerDouble::Options o;
  o.bookmark_interval = 50ms;
  Restart(o);
  auto w = Watch(kTfJobs, "allowWatchBookmarks=true&resourceVersion=" + std::to_string(server_->ResourceVersion()));
  auto b1 = w->Next();
  ASSERT_TRUE(b1);
  EXPECT_EQ((*b1)["type"], "BOOKMARK");
  const json& obj = (*b1)["object"];
  EXPECT_EQ(obj["kind"], "TFJob");
  EXPECT_EQ(obj["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(obj["metadata"].size(), 1u) << obj;
  EXPECT_FALSE(obj.contains("spec"));

  json job = MustCreate(kTfJobs, TfJob("a"));
  auto added = w->NextNonBookmark();
  ASSERT_TRUE(added);
  EXPECT_EQ((*added)["type"], "ADDED");
  // A later bookmark is at least at the object's version.
  std::optional<json> later;
  for (int i = 0; i < 100 && !later; ++i) {
    auto ev = w->Next();
    ASSERT_TRUE(ev);
    if ((*ev)["type"] == "BOOKMARK") later = ev;
  }
  ASSERT_TRUE(later);
  EXPECT_GE(std::stoull((*later)["object"]["metadata"]["resourceVersion"].get<std::string>()), std::stoull(Rv(job)));

  // Without allowWatchBookmarks, none.
  auto plain = Watch(kTfJobs, "resourceVersion=" + std::to_string(server_->ResourceVersion()));
  EXPECT_FALSE(plain->Next(300ms));

  // sendInitialEvents ends the initial list with an annotated bookmark.
  auto initial = Watch(kTfJobs, "sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan");
  auto i1 = initial->Next();
  auto i2 = initial->Next();
  ASSERT_TRUE(i1 && i2);
  EXPECT_EQ((*i1)["type"], "ADDED");
  EXPECT_EQ((*i2)["type"], "BOOKMARK");
  EXPECT_EQ((*i2)["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
}

TEST_F(HttpTest, CompactedVersionsGetGone) {
  ApiServerDouble::Options o;
  o.compaction_window = 3;
  Restart(o);
  std::string first = Rv(MustCreate(kConfigMaps, ConfigMap("c0")));
  for (int i = 1; i < 6; ++i) MustCreate(kConfigMaps, ConfigMap(std::string("c").append(std::to_string(i))));
  auto w = Watch(kConfigMaps, "resourceVersion=" + first);
  ASSERT_EQ(w->code(), 200);
  auto ev = w->Next();
  ASSERT_TRUE(ev);
  EXPECT_EQ((*ev)["type"], "ERROR");
  const json& st = (*ev)["object"];
  EXPECT_EQ(st["kind"], "Status");
  EXPECT_EQ(st["code"], 410);
  EXPECT_EQ(st["reason"], "Expired");
  EXPECT_THAT(st["message"].get<std::string>(), HasSubstr("too old resource version"));
  EXPECT_TRUE(w->WaitEnded()) << "the server closes the stream after the error";

  // Within the window: fine.
  std::string recent = std::to_string(server_->ResourceVersion() - 2);
  auto ok = Watch(kConfigMaps, "resourceVersion=" + recent);
  auto replay = ok->Next();
  ASSERT_TRUE(replay);
  EXPECT_EQ((*replay)["type"], "ADDED");

  // CompactNow: anything older than now is gone; now itself is fine.
  server_->CompactNow();
  auto gone = Watch(kConfigMaps, "resourceVersion=" + recent);
  auto g = gone->Next();
  ASSERT_TRUE(g);
  EXPECT_EQ((*g)["object"]["code"], 410);
  auto current = Watch(kConfigMaps, "resourceVersion=" + std::to_string(server_->ResourceVersion()));
  EXPECT_FALSE(current->Next(200ms));
  MustCreate(kConfigMaps, ConfigMap("after"));
  auto after = current->Next();
  ASSERT_TRUE(after);
  EXPECT_EQ((*after)["type"], "ADDED");
}

TEST_F(HttpTest, WatchTimeoutEndsStreamCleanly) {
  auto w = Watch(kPods, "timeoutSeconds=1&resourceVersion=" + std::to_string(server_->ResourceVersion()));
  ASSERT_EQ(w->code(), 200);
  EXPECT_TRUE(w->WaitEnded(20s));
  EXPECT_FALSE(w->ended_with_error());
  EXPECT_TRUE(server_->WaitFor([&] { return server_->ActiveWatches() == 0; }, 10s));
}

TEST_F(HttpTest, DropWatchesCutsOpenStreams) {
  auto w1 = Watch(kPods, "");
  auto w2 = Watch(kTfJobs, "");
  ASSERT_TRUE(server_->WaitFor([&] { return server_->ActiveWatches() == 2; }, 10s));
  EXPECT_EQ(server_->ActiveWatches("pods"), 1);
  EXPECT_EQ(server_->ActiveWatches("tfjobs"), 1);
  server_->DropWatches();
  EXPECT_TRUE(w1->WaitEnded());
  EXPECT_TRUE(w2->WaitEnded());
  EXPECT_TRUE(server_->WaitFor([&] { return server_->ActiveWatches() == 0; }, 10s));
  // New watches work afterwards.
  auto w3 = Watch(kPods, "resourceVersion=" + std::to_string(server_->ResourceVersion()));
  MustCreate(kPods, Pod("p"));
  EXPECT_TRUE(w3->NextNonBookmark());
}

TEST_F(HttpTest, FaultsFailTheNextMatchingRequests) {
  json job = MustCreate(kTfJobs, TfJob("mnist"));
  ASSERT_TRUE(
      server_->InjectFault({.method = "PUT", .path_regex = ".*/tfjobs/[^/]+/status", .code = 409, .count = 2}).ok());
  json st = job;
  st["status"] = {{"conditions", json::array()}};
  st["metadata"].erase("resourceVersion");
  ExpectStatus(client_->Put(kTfJobs + "/mnist/status", st), 409, "Conflict");
  EXPECT_EQ(client_->Put(kTfJobs + "/mnist", job).code, 200) << "other paths are unaffected";
  ExpectStatus(client_->Put(kTfJobs + "/mnist/status", st), 409, "Conflict");
  EXPECT_EQ(client_->Put(kTfJobs + "/mnist/status", st).code, 200) << "count exhausted";

  ASSERT_TRUE(
      server_->InjectFault({.method = "GET", .path_regex = "/api/v1/namespaces/default/pods", .code = 500}).ok());
  ExpectStatus(client_->Get(kPods), 500, "InternalError");
  EXPECT_EQ(client_->Get(kPods).code, 200);

  ASSERT_TRUE(server_->InjectFault({.method = "WATCH", .path_regex = ".*/pods", .code = 503, .count = -1}).ok());
  EXPECT_EQ(client_->Get(kPods).code, 200) << "WATCH faults spare plain GETs";
  WatchStream w(server_->url(), kPods + "?watch=1");
  EXPECT_EQ(w.code(), 503);
  WatchStream w2(server_->url(), kPods + "?watch=1");
  EXPECT_EQ(w2.code(), 503) << "count -1 lasts until cleared";
  server_->ClearFaults();
  WatchStream w3(server_->url(), kPods + "?watch=1&timeoutSeconds=1");
  EXPECT_EQ(w3.code(), 200);

  ASSERT_TRUE(
      server_->InjectFault({.method = "POST", .code = 429, .reason = "TooManyRequests", .message = "slow down"}).ok());
  Response limited = client_->Post(kConfigMaps, ConfigMap("x"));
  ExpectStatus(limited, 429, "TooManyRequests");
  EXPECT_EQ(limited.body["message"], "slow down");

  // Delay only.
  ASSERT_TRUE(server_->InjectFault({.method = "GET", .path_regex = ".*", .code = 0, .delay = 50ms}).ok());
  EXPECT_EQ(client_->Get(kPods).code, 200);

  EXPECT_EQ(server_->InjectFault({.path_regex = "("}).code(), Code::kInvalidArgument);
  EXPECT_EQ(server_->InjectFault({.count = 0}).code(), Code::kInvalidArgument);
}

TEST_F(HttpTest, RequestsAreRecorded) {
  server_->ClearRequests();
  MustCreate(kTfJobs, TfJob("a"));
  client_->Get(kTfJobs + "/missing");
  auto reqs = server_->Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].path, kTfJobs);
  EXPECT_EQ(reqs[0].code, 201);
  EXPECT_EQ(reqs[1].code, 404);
  auto w = Watch(kTfJobs, "timeoutSeconds=5");
  ASSERT_TRUE(server_->WaitFor([&] { return server_->Requests().size() == 3; }, 10s));
  EXPECT_TRUE(server_->Requests()[2].watch);
}

TEST_F(HttpTest, TablesForKubectl) {
  MustCreate(kTfJobs, TfJob("mnist"));
  ASSERT_TRUE(
      server_
          ->MergePatch("tfjobs", "default", "mnist",
                       {{"status",
                         {{"conditions",
                           {{{"type", "Created"}, {"status", "True"}}, {{"type", "Running"}, {"status", "True"}}}}}}},
                       true)
          .ok());
  Response t = client_->Get(kTfJobs, "application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
  ASSERT_EQ(t.code, 200) << t.text;
  EXPECT_EQ(t.body["kind"], "Table");
  EXPECT_EQ(t.body["apiVersion"], "meta.k8s.io/v1");
  std::vector<std::string> columns;
  for (const auto& c : t.body["columnDefinitions"]) columns.push_back(c["name"]);
  EXPECT_EQ(columns, (std::vector<std::string>{"Name", "State", "Age"}));
  ASSERT_EQ(t.body["rows"].size(), 1u);
  const json& cells = t.body["rows"][0]["cells"];
  EXPECT_EQ(cells[0], "mnist");
  EXPECT_EQ(cells[1], "Running");
  EXPECT_TRUE(cells[2].is_string());
  EXPECT_EQ(t.body["rows"][0]["object"]["kind"], "PartialObjectMetadata");

  Response one = client_->Get(kTfJobs + "/mnist", "application/json;as=Table;v=v1beta1;g=meta.k8s.io");
  ASSERT_EQ(one.code, 200);
  EXPECT_EQ(one.body["apiVersion"], "meta.k8s.io/v1beta1");
  Response plain =
      client_->Get(kTfJobs, "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io,application/json");
  EXPECT_EQ(plain.body["kind"], "TFJobList");
  EXPECT_EQ(client_->Get(kTfJobs, "application/vnd.kubernetes.protobuf").code, 406);
}

TEST_F(HttpTest, EventsAndLeases) {
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", "mnist.17a"}}},
                {"involvedObject", {{"kind", "TFJob"}, {"name", "mnist"}, {"namespace", "default"}}},
                {"reason", "TFJobCreated"},
                {"message", "created"},
                {"type", "Normal"}};
  MustCreate("/api/v1/namespaces/default/events", event);
  json other = event;
  other["metadata"]["name"] = "other.1";
  other["involvedObject"]["name"] = "other";
  MustCreate("/api/v1/namespaces/default/events", other);
  Response list = client_->Get("/api/v1/namespaces/default/events?fieldSelector=" + Q("involvedObject.name=mnist"));
  ASSERT_EQ(list.code, 200);
  ASSERT_EQ(list.body["items"].size(), 1u);
  EXPECT_EQ(list.body["items"][0]["reason"], "TFJobCreated");

  // Leader election: create, then renew with the current version only.
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "tfjob-operator"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
  json held = MustCreate(leases, lease);
  json renew = held;
  renew["spec"]["renewTime"] = "2024-01-01T00:00:00.000000Z";
  Response renewed = client_->Put(leases + "/tfjob-operator", renew);
  ASSERT_EQ(renewed.code, 200);
  json steal = held;  // a rival with the old version loses
  steal["spec"]["holderIdentity"] = "b";
  ExpectStatus(client_->Put(leases + "/tfjob-operator", steal), 409, "Conflict");
}

TEST_F(HttpTest, BearerTokenIsRequiredWhenSet) {
  ApiServerDouble::Options o;
  o.bearer_token = "s3cret";
  Restart(o);
  EXPECT_EQ(client_->Get(kPods).code, 200);
  Client anonymous(server_->url());
  ExpectStatus(anonymous.Get(kPods), 401, "Unauthorized");
  Client wrong(server_->url(), "guess");
  EXPECT_EQ(wrong.Get(kPods).code, 401);
  EXPECT_EQ(anonymous.Get("/healthz").code, 200);
  EXPECT_THAT(server_->Kubeconfig(), HasSubstr("token: s3cret"));
}

TEST_F(HttpTest, UnknownPathsAndMethods) {
  ExpectStatus(client_->Get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"), 404, "NotFound");
  ExpectStatus(client_->Get("/nothing/here"), 404, "NotFound");
  ExpectStatus(client_->Get("/api/v2/pods"), 404, "NotFound");
  ExpectStatus(client_->Get("/api/v1/namespaces/default/namespaces"), 404, "NotFound");
  ExpectStatus(client_->Get("/api/v1/namespaces/default/pods/a/b/c"), 404, "NotFound");
  ExpectStatus(client_->Post(kPods + "/named", Pod("named")), 405, "MethodNotAllowed");
  ExpectStatus(client_->Post("/api/v1/pods", Pod("x")), 405, "MethodNotAllowed");
  ExpectStatus(client_->Do("OPTIONS", kPods), 405, "MethodNotAllowed");
  ExpectStatus(client_->Do("DELETE", "/api"), 405, "MethodNotAllowed");
  Response root = client_->Get("/");
  ASSERT_EQ(root.code, 200);
  EXPECT_THAT(root.body["paths"].get<std::vector<std::string>>(), ::testing::Contains("/apis/kubeflow.org/v1"));
}

// ---- Garbage ------------------------------------------------------------------

// Sends raw bytes and reads whatever comes back until close or a bounded wait.
std::string RawExchange(int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "<connect failed>";
  }
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 2000) > 0) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST_F(HttpTest, GarbageNeverCrashesTheServer) {
  static const char kBinary[] = "\x00\x01\x02\xff garbage\r\n\r\n";
  const std::vector<std::string> malformed = {
      std::string(kBinary, sizeof kBinary - 1),
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "GET relative HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nno colon here\r\n\r\n",
      "GET / HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n",
      "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n",
      "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"trunc",
      "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n",
      "PUT /api/v1/namespaces/default/pods/%zz%00%ff HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
      "GET /api/v1/namespaces/default/pods?labelSelector=%28%28%28&fieldSelector=%3D%3D%3D HTTP/1.1\r\n\r\n",
      "GET /apis/kubeflow.org/v1/namespaces/default/tfjobs?watch=1&resourceVersion=-5 HTTP/1.1\r\n\r\n",
      "GET /apis/kubeflow.org/v1/namespaces/default/tfjobs?watch=1&timeoutSeconds=x HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nBROKEN\r\n\r\n",
  };
  for (const auto& m : malformed) RawExchange(server_->port(), m);
  std::string reply = RawExchange(server_->port(), "GET relative HTTP/1.1\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("400"));

  std::mt19937 rng(20240501);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
  };
  for (int i = 0; i < 20; ++i) RawExchange(server_->port(), random_bytes(1 + rng() % 4096));

  // Well-formed HTTP, nonsense content.
  const std::vector<std::string> segments = {"api",
                                             "apis",
                                             "v1",
                                             "namespaces",
                                             "default",
                                             "pods",
                                             "tfjobs",
                                             "kubeflow.org",
                                             "status",
                                             "watch",
                                             "..",
                                             "%00",
                                             "%ff",
                                             "services",
                                             "customresourcedefinitions",
                                             "apiextensions.k8s.io",
                                             "x"};
  const std::vector<std::string> methods = {"GET", "POST", "PUT", "PATCH", "DELETE"};
  const std::vector<std::string> bodies = {"",
                                           "{",
                                           "null",
                                           "[]",
                                           "{\"metadata\":5}",
                                           "{\"metadata\":{\"name\":7}}",
                                           "{\"metadata\":{\"labels\":[1]}}",
                                           "{\"metadata\":{\"ownerReferences\":7}}",
                                           "{\"metadata\":{\"name\":\"n\",\"finalizers\":{}}}",
                                           "{\"spec\":{\"names\":1},\"metadata\":{\"name\":\"a.b\"}}",
                                           "[{\"op\":\"remove\",\"path\":\"/metadata\"}]",
                                           "{\"metadata\":{\"name\":\"ok\"},\"spec\":{}}"};
  const std::vector<std::string> types = {"application/json", "application/merge-patch+json",
                                          "application/json-patch+json", "application/strategic-merge-patch+json",
                                          "text/plain"};
  for (int i = 0; i < 300; ++i) {
    std::string path;
    int n = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < n; ++k) path += "/" + segments[rng() % segments.size()];
    if (rng() % 3 == 0)
      path += "?limit=" + std::to_string(static_cast<int>(rng() % 5) - 1) + "&continue=" + Q(random_bytes(5));
    if (path.find("watch") != std::string::npos)
      path += (path.find('?') == std::string::npos ? "?" : "&") + std::string("timeoutSeconds=1");
    std::string body = rng() % 5 == 0 ? random_bytes(rng() % 64) : bodies[rng() % bodies.size()];
    Response r = client_->Do(methods[rng() % methods.size()], path, body, types[rng() % types.size()]);
    ASSERT_NE(r.code, 0) << "request " << i << " " << path << ": " << r.text;
    EXPECT_NE(r.code, 500) << path << " " << body << ": " << r.text;
  }

  EXPECT_EQ(client_->Get("/healthz").code, 200);
  EXPECT_EQ(client_->Post(kPods, Pod("still-alive")).code, 201);
}

// ---- The standalone binary ----------------------------------------------------

TEST(ApiServerDoubleBinary, PrintsPortServesAndStopsOnSigterm) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execl(TFJOB_APISERVER_DOUBLE_BIN, TFJOB_APISERVER_DOUBLE_BIN, "--print-port", "--compaction-window", "5",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string line;
  pollfd p{out[0], POLLIN, 0};
  while (line.find('\n') == std::string::npos && poll(&p, 1, 10000) > 0) {
    char buf[64];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int port = std::atoi(line.c_str());
  EXPECT_GT(port, 0) << "stdout: " << line;
  if (port > 0) {
    Client c("http://127.0.0.1:" + std::to_string(port));
    EXPECT_EQ(c.Get("/healthz").code, 200);
    EXPECT_EQ(c.Get("/apis/kubeflow.org/v1").code, 200);
  }
  kill(pid, SIGTERM);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 200 && done == 0; ++i) {
    done = waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(50ms);
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "did not stop on SIGTERM";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(ApiServerDoubleBinary, HelpAndVersion) {
  auto h = tfjob::testing::Run({TFJOB_APISERVER_DOUBLE_BIN, "--help"});
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_THAT(h.out, ::testing::StartsWith("usage: tfjob-apiserver-double [flags]\n"));
  EXPECT_THAT(h.out, ::testing::HasSubstr("--print-port"));
  auto v = tfjob::testing::Run({TFJOB_APISERVER_DOUBLE_BIN, "--version"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_THAT(v.out, ::testing::MatchesRegex("tfjob-apiserver-double [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  auto bad = tfjob::testing::Run({TFJOB_APISERVER_DOUBLE_BIN, "--nope"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, ::testing::StartsWith("tfjob-apiserver-double: error: "));
}

}  // namespace
}  // namespace tfjob::testing
