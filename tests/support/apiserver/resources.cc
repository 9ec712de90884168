#include "tests/support/apiserver/resources.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>

#include "common/time.h"
#include "tests/support/apiserver/selectors.h"

namespace tfjob::testing::apiserver {

using nlohmann::json;

namespace {

PrinterColumn AgeColumn() {
  return {"Age",
          "date",
          "",
          "CreationTimestamp is a timestamp representing the server time when this object was created.",
          ".metadata.creationTimestamp",
          0};
}

PrinterColumn Column(std::string name, std::string type, std::string path, int priority = 0) {
  return {std::move(name), std::move(type), "", "", std::move(path), priority};
}

const std::vector<std::string> kVerbs = {"create", "delete", "deletecollection", "get",
                                         "list",   "patch",  "update",           "watch"};

std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const auto& e : j) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  }
  return out;
}

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::set<std::string> ResourceInfo::selectable_fields() const {
  std::set<std::string> s = field_selectors;
  s.insert("metadata.name");
  if (namespaced) s.insert("metadata.namespace");
  return s;
}

std::vector<ResourceInfo> BuiltinResources() {
  std::vector<ResourceInfo> out;
  {
    ResourceInfo r;
    r.version = "v1", r.kind = "Pod", r.plural = "pods", r.singular = "pod";
    r.has_status = true;
    r.short_names = {"po"}, r.categories = {"all"};
    r.columns = {Column("Status", "string", ".status.phase"), AgeColumn()};
    r.field_selectors = {"spec.nodeName",    "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                         "spec.hostNetwork", "status.phase",       "status.podIP",       "status.nominatedNodeName"};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1", r.kind = "Service", r.plural = "services", r.singular = "service";
    r.has_status = true;
    r.short_names = {"svc"}, r.categories = {"all"};
    r.columns = {Column("Type", "string", ".spec.type"), Column("Cluster-IP", "string", ".spec.clusterIP"),
                 AgeColumn()};
    r.name_rule = NameRule::kDns1035Label;
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1", r.kind = "Event", r.plural = "events", r.singular = "event";
    r.short_names = {"ev"};
    r.columns = {Column("Type", "string", ".type"), Column("Reason", "string", ".reason"),
                 Column("Message", "string", ".message"), AgeColumn()};
    r.field_selectors = {"involvedObject.kind",
                         "involvedObject.namespace",
                         "involvedObject.name",
                         "involvedObject.uid",
                         "involvedObject.apiVersion",
                         "involvedObject.resourceVersion",
                         "involvedObject.fieldPath",
                         "reason",
                         "reportingComponent",
                         "source",
                         "type"};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1", r.kind = "ConfigMap", r.plural = "configmaps", r.singular = "configmap";
    r.short_names = {"cm"};
    r.columns = {AgeColumn()};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1", r.kind = "Secret", r.plural = "secrets", r.singular = "secret";
    r.columns = {Column("Type", "string", ".type"), AgeColumn()};
    r.field_selectors = {"type"};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "networking.k8s.io", r.version = "v1", r.kind = "NetworkPolicy", r.plural = "networkpolicies";
    r.singular = "networkpolicy";
    r.short_names = {"netpol"};
    r.columns = {Column("Pod-Selector", "string", ".spec.podSelector"), AgeColumn()};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1", r.kind = "Namespace", r.plural = "namespaces", r.singular = "namespace";
    r.namespaced = false, r.has_status = true;
    r.short_names = {"ns"};
    r.columns = {Column("Status", "string", ".status.phase"), AgeColumn()};
    r.field_selectors = {"status.phase"};
    r.name_rule = NameRule::kDns1123Label;
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "coordination.k8s.io", r.version = "v1", r.kind = "Lease", r.plural = "leases", r.singular = "lease";
    r.columns = {Column("Holder", "string", ".spec.holderIdentity"), AgeColumn()};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "events.k8s.io", r.version = "v1", r.kind = "Event", r.plural = "events", r.singular = "event";
    r.short_names = {"ev"};
    r.columns = {Column("Type", "string", ".type"), Column("Reason", "string", ".reason"),
                 Column("Note", "string", ".note"), AgeColumn()};
    r.field_selectors = {"reason",         "type",           "reportingController",
                         "regarding.kind", "regarding.name", "regarding.namespace",
                         "regarding.uid"};
    out.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "apiextensions.k8s.io", r.version = "v1", r.kind = "CustomResourceDefinition";
    r.plural = "customresourcedefinitions", r.singular = "customresourcedefinition";
    r.namespaced = false, r.has_status = true;
    r.short_names = {"crd", "crds"}, r.categories = {"api-extensions"};
    r.columns = {Column("Created At", "string", ".metadata.creationTimestamp")};
    out.push_back(r);
  }
  for (auto& r : out) r.list_kind = r.kind + "List";
  return out;
}

StatusOr<std::vector<ResourceInfo>> ResourcesFromCrd(const json& crd) {
  if (!crd.is_object() || !crd.contains("spec") || !crd["spec"].is_object()) {
    return InvalidArgument("spec: Required value");
  }
  const json& spec = crd["spec"];
  const json names = spec.value("names", json::object());
  ResourceInfo base;
  base.group = Str(spec, "group");
  base.kind = Str(names, "kind");
  base.plural = Str(names, "plural");
  base.singular = Str(names, "singular");
  base.list_kind = Str(names, "listKind");
  if (base.group.empty() || base.group.find('.') == std::string::npos) {
    return InvalidArgument("spec.group: Invalid value: \"" + base.group +
                           "\": should be a domain with at least one dot");
  }
  if (base.plural.empty()) return InvalidArgument("spec.names.plural: Required value");
  if (base.kind.empty()) return InvalidArgument("spec.names.kind: Required value");
  if (!CheckDns1123Label(base.plural).empty())
    return InvalidArgument("spec.names.plural: Invalid value: \"" + base.plural + "\"");
  if (base.singular.empty()) base.singular = ToLower(base.kind);
  if (base.list_kind.empty()) base.list_kind = base.kind + "List";
  std::string expected_name = base.plural + "." + base.group;
  std::string name = crd.contains("metadata") ? Str(crd["metadata"], "name") : "";
  if (name != expected_name) {
    return InvalidArgument("metadata.name: Invalid value: \"" + name +
                           "\": must be spec.names.plural+\".\"+spec.group");
  }
  base.crd_name = name;
  base.short_names = Strings(names.value("shortNames", json()));
  base.categories = Strings(names.value("categories", json()));
  std::string scope = Str(spec, "scope");
  if (scope != "Namespaced" && scope != "Cluster") {
    return InvalidArgument("spec.scope: Unsupported value: \"" + scope +
                           "\": supported values: \"Cluster\", \"Namespaced\"");
  }
  base.namespaced = scope == "Namespaced";

  std::vector<ResourceInfo> out;
  const json versions = spec.value("versions", json::array());
  if (!versions.is_array() || versions.empty()) return InvalidArgument("spec.versions: Required value");
  for (const auto& v : versions) {
    if (!v.is_object()) return InvalidArgument("spec.versions: must be objects");
    if (!v.value("served", false)) continue;
    ResourceInfo r = base;
    r.version = Str(v, "name");
    if (r.version.empty()) return InvalidArgument("spec.versions[].name: Required value");
    r.has_status = v.contains("subresources") && v["subresources"].is_object() && v["subresources"].contains("status");
    const json cols = v.value("additionalPrinterColumns", json::array());
    if (cols.is_array() && !cols.empty()) {
      for (const auto& c : cols) {
        PrinterColumn pc;
        pc.name = Str(c, "name");
        pc.type = Str(c, "type");
        pc.format = Str(c, "format");
        pc.description = Str(c, "description");
        pc.json_path = Str(c, "jsonPath");
        pc.priority = c.value("priority", 0);
        if (pc.name.empty() || pc.json_path.empty()) {
          return InvalidArgument("spec.versions[].additionalPrinterColumns: name and jsonPath are required");
        }
        r.columns.push_back(pc);
      }
    } else {
      r.columns = {AgeColumn()};
    }
    for (const auto& f : v.value("selectableFields", json::array())) {
      std::string p = Str(f, "jsonPath");
      if (!p.empty() && p[0] == '.') r.field_selectors.insert(p.substr(1));
    }
    out.push_back(r);
  }
  if (out.empty()) return InvalidArgument("spec.versions: at least one version must be served");
  return out;
}

json TfJobCrd() {
  return json::parse(R"({
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "tfjobs.kubeflow.org"},
    "spec": {
      "group": "kubeflow.org",
      "names": {"kind": "TFJob", "listKind": "TFJobList", "plural": "tfjobs", "singular": "tfjob"},
      "scope": "Namespaced",
      "versions": [{
        "name": "v1", "served": true, "storage": true,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
          {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
          {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
        ],
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
      }]
    }
  })");
}

namespace {

json PodGroupCrd(const std::string& group, const std::string& version, bool namespaced_status_columns) {
  json columns = json::array();
  if (namespaced_status_columns) {
    columns = json::array({{{"name", "Status"}, {"type", "string"}, {"jsonPath", ".status.phase"}},
                           {{"name", "MinMember"}, {"type", "integer"}, {"jsonPath", ".spec.minMember"}},
                           {{"name", "Queue"}, {"type", "string"}, {"jsonPath", ".spec.queue"}},
                           {{"name", "Age"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"}}});
  } else {
    columns = json::array({{{"name", "Phase"}, {"type", "string"}, {"jsonPath", ".status.phase"}},
                           {{"name", "MinMember"}, {"type", "integer"}, {"jsonPath", ".spec.minMember"}},
                           {{"name", "Age"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"}}});
  }
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "podgroups." + group}}},
          {"spec",
           {{"group", group},
            {"names",
             {{"kind", "PodGroup"}, {"listKind", "PodGroupList"}, {"plural", "podgroups"}, {"singular", "podgroup"}}},
            {"scope", "Namespaced"},
            {"versions",
             json::array(
                 {{{"name", version},
                   {"served", true},
                   {"storage", true},
                   {"subresources", {{"status", json::object()}}},
                   {"additionalPrinterColumns", columns},
                   {"schema",
                    {{"openAPIV3Schema", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}}})}}}};
}

}  // namespace

json VolcanoPodGroupCrd() { return PodGroupCrd("scheduling.volcano.sh", "v1beta1", true); }
json SchedulerPluginsPodGroupCrd() { return PodGroupCrd("scheduling.x-k8s.io", "v1alpha1", false); }

json ApiVersionsDoc(const std::string& server_address) {
  return {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs", {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}}}};
}

namespace {

// Groups in first-registered order, each with its versions in order.
std::vector<std::pair<std::string, std::vector<std::string>>> Groups(const std::vector<ResourceInfo>& resources) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto& r : resources) {
    if (r.group.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == r.group; });
    if (it == out.end()) {
      out.push_back({r.group, {}});
      it = out.end() - 1;
    }
    if (std::find(it->second.begin(), it->second.end(), r.version) == it->second.end()) {
      it->second.push_back(r.version);
    }
  }
  return out;
}

json GroupEntry(const std::string& name, const std::vector<std::string>& versions) {
  json vs = json::array();
  for (const auto& v : versions) vs.push_back({{"groupVersion", name + "/" + v}, {"version", v}});
  return {{"name", name}, {"versions", vs}, {"preferredVersion", vs[0]}};
}

}  // namespace

json ApiGroupListDoc(const std::vector<ResourceInfo>& resources) {
  json groups = json::array();
  for (const auto& [name, versions] : Groups(resources)) groups.push_back(GroupEntry(name, versions));
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

json ApiGroupDoc(const std::vector<ResourceInfo>& resources, const std::string& group) {
  for (const auto& [name, versions] : Groups(resources)) {
    if (name == group) {
      json g = GroupEntry(name, versions);
      g["kind"] = "APIGroup";
      g["apiVersion"] = "v1";
      return g;
    }
  }
  return nullptr;
}

json ApiResourceListDoc(const std::vector<ResourceInfo>& resources, const std::string& group,
                        const std::string& version) {
  json list = json::array();
  for (const auto& r : resources) {
    if (r.group != group || r.version != version) continue;
    json e = {{"name", r.plural},
              {"singularName", r.singular},
              {"namespaced", r.namespaced},
              {"kind", r.kind},
              {"verbs", kVerbs}};
    if (!r.short_names.empty()) e["shortNames"] = r.short_names;
    if (!r.categories.empty()) e["categories"] = r.categories;
    list.push_back(e);
    if (r.has_status) {
      list.push_back({{"name", r.plural + "/status"},
                      {"singularName", ""},
                      {"namespaced", r.namespaced},
                      {"kind", r.kind},
                      {"verbs", {"get", "patch", "update"}}});
    }
  }
  if (list.empty()) return nullptr;
  json doc = {{"kind", "APIResourceList"},
              {"groupVersion", group.empty() ? version : group + "/" + version},
              {"resources", list}};
  if (!group.empty()) doc["apiVersion"] = "v1";
  return doc;
}

namespace {

std::string GvPath(const ResourceInfo& r) { return r.group.empty() ? "api/" + r.version : "apis/" + r.api_version(); }

// Reverse-domain schema names as k8s uses them ("io.k8s.api.core.v1.Pod").
std::string SchemaName(const ResourceInfo& r) {
  if (r.group.empty()) return "io.k8s.api.core." + r.version + "." + r.kind;
  std::string rev;
  std::string g = r.group;
  while (!g.empty()) {
    size_t dot = g.rfind('.');
    std::string part = dot == std::string::npos ? g : g.substr(dot + 1);
    g = dot == std::string::npos ? "" : g.substr(0, dot);
    rev += (rev.empty() ? "" : ".") + part;
  }
  return rev + "." + r.version + "." + r.kind;
}

json Param(const std::string& name) {
  return {{"name", name}, {"in", "query"}, {"schema", {{"type", "string"}, {"uniqueItems", true}}}};
}

json Operation(const ResourceInfo& r, const std::string& action, bool writes) {
  json params = json::array();
  if (writes) {
    for (const char* p : {"dryRun", "fieldManager", "fieldValidation"}) params.push_back(Param(p));
  }
  if (action == "list" || action == "deletecollection") {
    for (const char* p : {"labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch",
                          "allowWatchBookmarks", "timeoutSeconds"}) {
      params.push_back(Param(p));
    }
  }
  json op = {{"operationId", action + r.kind},
             {"x-kubernetes-action", action},
             {"x-kubernetes-group-version-kind", {{"group", r.group}, {"version", r.version}, {"kind", r.kind}}},
             {"parameters", params},
             {"responses", {{"200", {{"description", "OK"}}}}}};
  return op;
}

}  // namespace

json OpenApiV3Root(const std::vector<ResourceInfo>& resources) {
  json paths = json::object();
  for (const auto& r : resources) {
    std::string gv = GvPath(r);
    if (paths.contains(gv)) continue;
    // The hash changes with the document, so kubectl's cache never serves a stale one.
    size_t h = std::hash<std::string>{}(OpenApiV3GroupVersion(resources, gv).dump());
    char hex[32];
    std::snprintf(hex, sizeof hex, "%016zX", h);
    paths[gv] = {{"serverRelativeURL", "/openapi/v3/" + gv + "?hash=" + hex}};
  }
  return {{"paths", paths}};
}

json OpenApiV3GroupVersion(const std::vector<ResourceInfo>& resources, const std::string& gv_path) {
  json paths = json::object();
  json schemas = json::object();
  for (const auto& r : resources) {
    if (GvPath(r) != gv_path) continue;
    std::string base = "/" + gv_path + (r.namespaced ? "/namespaces/{namespace}/" : "/") + r.plural;
    paths[base] = {{"get", Operation(r, "list", false)},
                   {"post", Operation(r, "post", true)},
                   {"delete", Operation(r, "deletecollection", true)}};
    paths[base + "/{name}"] = {{"get", Operation(r, "get", false)},
                               {"put", Operation(r, "put", true)},
                               {"patch", Operation(r, "patch", true)},
                               {"delete", Operation(r, "delete", true)}};
    if (r.has_status) {
      paths[base + "/{name}/status"] = {{"get", Operation(r, "get", false)},
                                        {"put", Operation(r, "put", true)},
                                        {"patch", Operation(r, "patch", true)}};
    }
    // The double does not validate against schemas: every kind takes any fields.
    schemas[SchemaName(r)] = {
        {"type", "object"},
        {"x-kubernetes-preserve-unknown-fields", true},
        {"x-kubernetes-group-version-kind", {{{"group", r.group}, {"version", r.version}, {"kind", r.kind}}}}};
  }
  if (paths.empty()) return nullptr;
  return {{"openapi", "3.0.0"},
          {"info", {{"title", "Kubernetes (tfjob apiserver double)"}, {"version", "unversioned"}}},
          {"paths", paths},
          {"components", {{"schemas", schemas}}}};
}

std::vector<json> JsonPath(const json& object, const std::string& path_in) {
  std::string path = path_in;
  if (path.size() >= 2 && path.front() == '{' && path.back() == '}') path = path.substr(1, path.size() - 2);
  std::vector<const json*> cur = {&object};
  size_t i = 0;
  while (i < path.size()) {
    std::vector<const json*> next;
    if (path[i] == '.') {
      ++i;
      size_t j = i;
      while (j < path.size() && path[j] != '.' && path[j] != '[') ++j;
      std::string key = path.substr(i, j - i);
      i = j;
      if (key.empty()) continue;
      for (const json* n : cur) {
        if (n->is_object()) {
          auto it = n->find(key);
          if (it != n->end()) next.push_back(&*it);
        }
      }
    } else if (path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string::npos) return {};
      std::string idx = path.substr(i + 1, close - i - 1);
      i = close + 1;
      for (const json* n : cur) {
        if (!n->is_array()) continue;
        long long size = static_cast<long long>(n->size());
        auto norm = [size](long long k) { return k < 0 ? std::max(0LL, size + k) : std::min(k, size); };
        if (idx == "*") {
          for (const auto& e : *n) next.push_back(&e);
          continue;
        }
        size_t colon = idx.find(':');
        try {
          if (colon == std::string::npos) {
            long long k = std::stoll(idx);
            if (k < 0) k += size;
            if (k >= 0 && k < size) next.push_back(&(*n)[static_cast<size_t>(k)]);
          } else {
            std::string a = idx.substr(0, colon), b = idx.substr(colon + 1);
            long long from = a.empty() ? 0 : norm(std::stoll(a));
            long long to = b.empty() ? size : norm(std::stoll(b));
            for (long long k = from; k < to; ++k) next.push_back(&(*n)[static_cast<size_t>(k)]);
          }
        } catch (const std::exception&) {
          return {};
        }
      }
    } else {
      return {};  // unsupported syntax: no match, as a missing field would be
    }
    cur = std::move(next);
  }
  std::vector<json> out;
  for (const json* n : cur) out.push_back(*n);
  return out;
}

std::string HumanDuration(std::chrono::seconds d) {
  long long s = d.count();
  char buf[64];
  if (s < -1) return "<invalid>";
  if (s < 0) return "0s";
  if (s < 120) {
    std::snprintf(buf, sizeof buf, "%llds", s);
    return buf;
  }
  long long m = s / 60;
  if (m < 10) {
    if (s % 60 == 0)
      std::snprintf(buf, sizeof buf, "%lldm", m);
    else
      std::snprintf(buf, sizeof buf, "%lldm%llds", m, s % 60);
    return buf;
  }
  if (m < 180) {
    std::snprintf(buf, sizeof buf, "%lldm", m);
    return buf;
  }
  long long h = s / 3600;
  if (h < 8) {
    if (m % 60 == 0)
      std::snprintf(buf, sizeof buf, "%lldh", h);
    else
      std::snprintf(buf, sizeof buf, "%lldh%lldm", h, m % 60);
  } else if (h < 48) {
    std::snprintf(buf, sizeof buf, "%lldh", h);
  } else if (h < 24 * 8) {
    if (h % 24 == 0)
      std::snprintf(buf, sizeof buf, "%lldd", h / 24);
    else
      std::snprintf(buf, sizeof buf, "%lldd%lldh", h / 24, h % 24);
  } else if (h < 24 * 365 * 2) {
    std::snprintf(buf, sizeof buf, "%lldd", h / 24);
  } else if (h < 24 * 365 * 8) {
    long long days = (h / 24) % 365;
    if (days == 0)
      std::snprintf(buf, sizeof buf, "%lldy", h / 24 / 365);
    else
      std::snprintf(buf, sizeof buf, "%lldy%lldd", h / 24 / 365, days);
  } else {
    std::snprintf(buf, sizeof buf, "%lldy", h / 24 / 365);
  }
  return buf;
}

json ToTable(const ResourceInfo& r, const std::vector<const json*>& objects, const std::string& resource_version,
             const std::string& continue_token, const std::string& table_api_version,
             std::chrono::system_clock::time_point now, bool include_column_definitions) {
  json defs = json::array();
  defs.push_back({{"name", "Name"},
                  {"type", "string"},
                  {"format", "name"},
                  {"description", "Name must be unique within a namespace."},
                  {"priority", 0}});
  for (const auto& c : r.columns) {
    defs.push_back({{"name", c.name},
                    {"type", c.type},
                    {"format", c.format},
                    {"description", c.description},
                    {"priority", c.priority}});
  }
  json rows = json::array();
  for (const json* o : objects) {
    json meta = o->value("metadata", json::object());
    json cells = json::array();
    cells.push_back(meta.value("name", ""));
    for (const auto& c : r.columns) {
      std::vector<json> vals = JsonPath(*o, c.json_path);
      if (vals.empty() || vals[0].is_null()) {
        cells.push_back(nullptr);
        continue;
      }
      const json& v = vals[0];
      const auto t = c.type == "date" && v.is_string() ? ParseRfc3339(v.get<std::string>()) : std::nullopt;
      if (t) {
        cells.push_back(HumanDuration(std::chrono::duration_cast<std::chrono::seconds>(now - *t)));
      } else if (c.type == "string" && !v.is_string()) {
        cells.push_back(v.dump());
      } else {
        cells.push_back(v);
      }
    }
    rows.push_back(
        {{"cells", cells},
         {"object", {{"kind", "PartialObjectMetadata"}, {"apiVersion", table_api_version}, {"metadata", meta}}}});
  }
  json metadata = {{"resourceVersion", resource_version}};
  if (!continue_token.empty()) metadata["continue"] = continue_token;
  json table = {{"kind", "Table"}, {"apiVersion", table_api_version}, {"metadata", metadata}};
  if (include_column_definitions) table["columnDefinitions"] = defs;
  table["rows"] = rows;
  return table;
}

}  // namespace tfjob::testing::apiserver
