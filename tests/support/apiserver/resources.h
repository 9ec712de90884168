// What the API server double serves: resource types (built in, or defined by
// CustomResourceDefinitions), their discovery documents, and their rendering
// as meta.k8s.io Tables for kubectl.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tfjob::testing::apiserver {

enum class NameRule { kDns1123Subdomain, kDns1123Label, kDns1035Label };

struct PrinterColumn {
  std::string name;
  std::string type;  // string | integer | number | boolean | date
  std::string format;
  std::string description;
  std::string json_path;  // a JSONPath subset: .a.b, [i], [-1:], [*]
  int priority = 0;
};

struct ResourceInfo {
  std::string group;  // "" for the core group
  std::string version;
  std::string kind;
  std::string list_kind;
  std::string plural;
  std::string singular;
  bool namespaced = true;
  bool has_status = false;  // a status subresource exists
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  std::vector<PrinterColumn> columns;     // Table columns after Name
  std::set<std::string> field_selectors;  // supported beyond metadata.name/namespace
  NameRule name_rule = NameRule::kDns1123Subdomain;
  std::string crd_name;  // the defining CRD, for custom resources

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // "pods", "tfjobs.kubeflow.org": unique among registered resources.
  std::string id() const { return group.empty() ? plural : plural + "." + group; }
  std::set<std::string> selectable_fields() const;
};

// core/v1 pods, services, events, configmaps, namespaces; coordination.k8s.io/v1
// leases; events.k8s.io/v1 events; apiextensions.k8s.io/v1 customresourcedefinitions.
std::vector<ResourceInfo> BuiltinResources();

// The resources a CRD defines, one per served version; INVALID_ARGUMENT
// naming the field when the CRD is not usable.
StatusOr<std::vector<ResourceInfo>> ResourcesFromCrd(const nlohmann::json& crd);

// kubeflow.org/v1 TFJob's CRD as crds/kubeflow.org_tfjobs.yaml defines it,
// without the OpenAPI schema (the double does not validate against schemas).
nlohmann::json TfJobCrd();
// The gang schedulers' PodGroup CRDs (Volcano's scheduling.volcano.sh/v1beta1,
// scheduler-plugins' scheduling.x-k8s.io/v1alpha1), schema-less, with a
// status subresource.
nlohmann::json VolcanoPodGroupCrd();
nlohmann::json SchedulerPluginsPodGroupCrd();

// Discovery documents.
nlohmann::json ApiVersionsDoc(const std::string& server_address);
nlohmann::json ApiGroupListDoc(const std::vector<ResourceInfo>& resources);
nlohmann::json ApiGroupDoc(const std::vector<ResourceInfo>& resources, const std::string& group);  // null if none
nlohmann::json ApiResourceListDoc(const std::vector<ResourceInfo>& resources, const std::string& group,
                                  const std::string& version);  // null if none

// OpenAPI v3, just enough for kubectl: the root index ("paths" ->
// serverRelativeURL with a content hash) and, per group-version, the
// operations with x-kubernetes-group-version-kind and their query parameters
// (kubectl looks for "fieldValidation" on PATCH to decide that the server
// validates), plus one permissive schema per kind.
nlohmann::json OpenApiV3Root(const std::vector<ResourceInfo>& resources);
// `gv_path` is "api/v1" or "apis/<group>/<version>"; null if unknown.
nlohmann::json OpenApiV3GroupVersion(const std::vector<ResourceInfo>& resources, const std::string& gv_path);

// Evaluates the JSONPath subset used by printer columns; the matches in order.
std::vector<nlohmann::json> JsonPath(const nlohmann::json& object, const std::string& path);

// k8s's HumanDuration: "45s", "5m3s", "3h", "12d", ...
std::string HumanDuration(std::chrono::seconds d);

// A meta.k8s.io Table (api_version "meta.k8s.io/v1" or "/v1beta1") with a row
// per object; rows carry PartialObjectMetadata.
nlohmann::json ToTable(const ResourceInfo& r, const std::vector<const nlohmann::json*>& objects,
                       const std::string& resource_version, const std::string& continue_token,
                       const std::string& table_api_version, std::chrono::system_clock::time_point now,
                       bool include_column_definitions = true);

}  // namespace tfjob::testing::apiserver
