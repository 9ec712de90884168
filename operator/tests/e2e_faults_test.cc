// The tfjob-operator binary end to end where a real API server alone will
// not do: the operator talks to the server through a FaultProxy
// (e2e_support.h) that injects 409s and 500s on cue, drops its watches and
// logs the requests it sent (the order of the task Secret's writes and the
// first pod); and the gang schedulers, whose PodGroup CRDs, once installed,
// would spoil e2e_test.cc's "CRD not installed" case on a shared control
// plane. The test's own writes go straight to the server.
#include <chrono>
#include <csignal>
#include <optional>
#include <set>

#include "operator/tests/e2e_support.h"

namespace tfjob::op::envtest {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

// With --task-tls the job's Secret holds the token and the job's CA
// certificate, task certificate and key (never the CA's key: exactly those
// four entries), and every pod mounts the three TLS files and is told where.
TEST_F(OperatorE2E, TaskTlsPutsTheJobsPkiInItsSecretAndMountsIt) {
  StartOperator({"--task-tls=true"});
  json created = Submit(SmallJob("tls", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("tls").size() == 2; })) << op_->output();
  auto secret = TryGet("secret", "tls-tfjob-auth");
  ASSERT_TRUE(secret);
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  std::set<std::string> keys;
  for (const auto& [k, v] : (*secret)["data"].items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"token", "ca.crt", "tls.crt", "tls.key"}));
  EXPECT_EQ(SecretText(*secret, "token").size(), 64u);
  ExpectPkiIn(*secret);
  for (const auto& pod : Pods("tls")) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    EXPECT_EQ(Env(pod, "TFJOB_TLS_DIR"), "/etc/tfjob/tls");
    EXPECT_EQ(pod["spec"]["volumes"][0]["secret"]["secretName"], "tls-tfjob-auth");
    EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][0],
              json({{"name", "tfjob-tls"}, {"mountPath", "/etc/tfjob/tls"}, {"readOnly", true}}));
  }
  // A second job gets a CA of its own.
  Submit(SmallJob("tls2", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("tls2").size() == 2; })) << op_->output();
  auto other = TryGet("secret", "tls2-tfjob-auth");
  ASSERT_TRUE(other);
  EXPECT_NE(SecretText(*other, "ca.crt"), SecretText(*secret, "ca.crt"));
}

// A Secret made before --task-tls was turned on has a token and no TLS
// keys; pods mounting it would wait forever. The operator adds the keys
// (after a conflicting write, on the retry) and keeps the token the
// running pods already hold.
TEST_F(OperatorE2E, TaskTlsAddsTheKeysToASecretMadeWithoutThem) {
  const std::string token(64, 'a');
  Apply(json({{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"type", "Opaque"},
              {"metadata", {{"name", "old-tfjob-auth"}, {"namespace", ns_}}},
              {"stringData", {{"token", token}}}})
            .dump());
  StartProxy();
  ASSERT_TRUE(proxy_->InjectFault({"PUT", ".*/secrets/old-tfjob-auth", 409, 1}).ok());
  StartOperatorBehindProxy({"--task-tls=true"});
  Submit(SmallJob("old", "ExitCode", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("old").size() == 2; })) << op_->output();
  auto secret = TryGet("secret", "old-tfjob-auth");
  ASSERT_TRUE(secret);
  EXPECT_EQ(SecretText(*secret, "token"), token);
  ExpectPkiIn(*secret);
  // No pod was created before the keys were there: the first pod comes
  // after the successful update.
  std::optional<size_t> updated, first_pod;
  const auto requests = proxy_->Requests();
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!updated && r.method == "PUT" && r.path.find("/secrets/old-tfjob-auth") != std::string::npos && r.code == 200) {
      updated = i;
    }
    if (!first_pod && r.method == "POST" && r.path.ends_with("/pods")) first_pod = i;
  }
  ASSERT_TRUE(updated && first_pod);
  EXPECT_LT(*updated, *first_pod);
  // Keys already there are left alone on later passes: a retryable
  // failure recreates a pod, which asks for the Secret again.
  const std::string ca = SecretText(*secret, "ca.crt");
  const std::string uid = Get("pod", "old-worker-1")["metadata"]["uid"];
  SetPhase("old-worker-1", "Failed", 137);
  ASSERT_TRUE(Eventually([&] {
    auto p = TryGet("pod", "old-worker-1");
    return p && (*p)["metadata"]["uid"] != uid;
  })) << op_->output();
  EXPECT_EQ(SecretText(Get("secret", "old-tfjob-auth"), "ca.crt"), ca);
  int puts = 0;
  for (const auto& r : proxy_->Requests()) {
    puts += r.method == "PUT" && r.path.find("/secrets/") != std::string::npos && r.code == 200;
  }
  EXPECT_EQ(puts, 1);
}

// The Secret cannot be written: the error is reported (and retried) and
// no pod is created until it is.
TEST_F(OperatorE2E, TaskTlsNoPodBeforeItsSecret) {
  StartProxy();
  ASSERT_TRUE(proxy_->InjectFault({"POST", ".*/secrets", 500, 2}).ok());
  StartOperatorBehindProxy({"--task-tls=true"});
  Submit(SmallJob("late", "Never", 2));
  ASSERT_TRUE(Eventually([&] { return Pods("late").size() == 2; })) << op_->output();
  EXPECT_THAT(op_->output(), HasSubstr("reconcile " + ns_ + "/late: "));
  std::optional<size_t> created, first_pod;
  const auto requests = proxy_->Requests();
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!created && r.method == "POST" && r.path.ends_with("/secrets") && r.code == 201) created = i;
    if (!first_pod && r.method == "POST" && r.path.ends_with("/pods")) first_pod = i;
  }
  ASSERT_TRUE(created && first_pod);
  EXPECT_LT(*created, *first_pod);
  ExpectPkiIn(Get("secret", "late-tfjob-auth"));
}

TEST_F(OperatorE2E, FaultsAndARestartLeaveNoDuplicatesOrOrphans) {
  // Conflicts on status writes, server errors on creates, dropped watches,
  // and the operator killed mid-reconcile and started again.
  StartProxy();
  ASSERT_TRUE(proxy_->InjectFault({"PUT", ".*/tfjobs/.*/status", 409, 3}).ok());
  ASSERT_TRUE(proxy_->InjectFault({"POST", ".*/pods", 500, 2}).ok());
  StartOperatorBehindProxy();
  Submit(SmallJob("ft", "OnFailure", 3));
  ASSERT_TRUE(Eventually([&] { return Pods("ft").size() == 3; })) << op_->output();
  proxy_->DropWatches();
  op_->Stop(SIGKILL);
  Submit(SmallJob("ft2", "OnFailure", 2));
  StartOperatorBehindProxy();
  ASSERT_TRUE(Eventually([&] { return Pods("ft2").size() == 2 && HasCondition("ft", "Created"); }))
      << op_->output() << "\nft2 pods: " << Pods("ft2").size() << "\nft: " << Job("ft").dump();
  // Every index exactly once; every pod owned by its job.
  std::set<std::string> names;
  for (const auto& p : Pods("ft")) names.insert(p["metadata"]["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"ft-worker-0", "ft-worker-1", "ft-worker-2"}));
  EXPECT_EQ(Services("ft").size(), 3u);
  // Deleting the job takes its pods with it (ownerReferences): the real
  // garbage collector, which may first have to discover the TFJob resource.
  Kubectl({"delete", "tfjob", "ft", "-n", ns_});
  ASSERT_TRUE(Eventually([&] { return Pods("ft").empty() && Services("ft").empty(); }, kGarbageCollectorTimeout));
}

// Gang scheduling with Volcano: the PodGroup comes first, owned by the job;
// pods wait until Volcano admits the gang (phase Inqueue); an edited
// PodGroup is put back; a finished job's PodGroup is deleted.
TEST_F(OperatorE2E, GangSchedulingWithVolcano) {
  for (const json& crd : {VolcanoPodGroupCrd(), SchedulerPluginsPodGroupCrd()}) {
    InstallCrd(crd);
  }
  StartOperator({"--gang-scheduler-name", "volcano"});
  const std::string pgs = "podgroups.scheduling.volcano.sh";
  const json job = Submit(Manifest("examples/operator/gang-scheduled.yaml"));
  ASSERT_TRUE(Eventually([&] { return TryGet(pgs, "gang").has_value(); })) << op_->output();
  json pg = Get(pgs, "gang");
  EXPECT_EQ(pg["spec"], json({{"minMember", 4}, {"queue", "research"}}));
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]);
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_TRUE(Pods("gang").empty());
  // Volcano says Pending, then admits the gang.
  Kubectl({"patch", "-n", ns_, pgs, "gang", "--subresource=status", "--type=merge", "-p",
           R"({"status":{"phase":"Pending"}})"});
  EXPECT_TRUE(Pods("gang").empty());
  Kubectl({"patch", "-n", ns_, pgs, "gang", "--subresource=status", "--type=merge", "-p",
           R"({"status":{"phase":"Inqueue"}})"});
  ASSERT_TRUE(Eventually([&] { return Pods("gang").size() == 4; })) << op_->output();
  const json pod = Get("pod", "gang-worker-1");
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "gang");
  EXPECT_EQ(pod["metadata"]["annotations"]["volcano.sh/task-spec"], "worker");
  // Someone edits the PodGroup: the operator restores the job's spec.
  Kubectl({"patch", "-n", ns_, pgs, "gang", "--type=merge", "-p", R"({"spec":{"minMember":1}})"});
  ASSERT_TRUE(Eventually([&] { return Get(pgs, "gang")["spec"]["minMember"] == 4; })) << op_->output();
  for (const auto& p : Pods("gang")) SetPhase(p["metadata"]["name"], "Running");
  SetPhase("gang-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return HasCondition("gang", "Succeeded"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] { return !TryGet(pgs, "gang"); })) << op_->output();
}

// scheduler-plugins: its PodGroup kind, and pods at once with the pod-group label.
TEST_F(OperatorE2E, GangSchedulingWithSchedulerPlugins) {
  InstallCrd(SchedulerPluginsPodGroupCrd());
  StartOperator({"--gang-scheduler-name", "scheduler-plugins"});
  const std::string pgs = "podgroups.scheduling.x-k8s.io";
  const json job = Submit(Manifest("examples/operator/gang-scheduled.yaml"));
  ASSERT_TRUE(Eventually([&] { return TryGet(pgs, "gang").has_value() && Pods("gang").size() == 4; })) << op_->output();
  const json pg = Get(pgs, "gang");
  EXPECT_EQ(pg["spec"], json({{"minMember", 4}, {"scheduleTimeoutSeconds", 300}}));
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]);
  const json pod = Get("pod", "gang-ps-0");
  EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins");
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "gang");
  // Deleting the job takes its PodGroup with it (ownerReference): the real
  // garbage collector, which may first have to discover both resources.
  Kubectl({"delete", "tfjob", "gang", "-n", ns_});
  EXPECT_TRUE(Eventually([&] { return !TryGet(pgs, "gang"); }, kGarbageCollectorTimeout));
}

}  // namespace
}  // namespace tfjob::op::envtest
