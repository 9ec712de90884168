#include "charts/tests/chart_rbac.h"

#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tfjob::charts {

using json = nlohmann::json;

std::string Str(const Permission& p) {
  return std::get<0>(p) + " " + (std::get<1>(p).empty() ? "core" : std::get<1>(p)) + "/" + std::get<2>(p) +
         (std::get<3>(p).empty() ? " (all namespaces)" : " in " + std::get<3>(p));
}

namespace {

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string s; std::getline(in, s, '/');) {
    if (!s.empty()) out.push_back(s);
  }
  return out;
}

}  // namespace

bool ToPermission(const Request& r, Permission* out) {
  std::vector<std::string> s = Segments(r.path);
  std::string group;
  size_t i;
  if (s.size() >= 2 && s[0] == "api") {
    i = 2;
  } else if (s.size() >= 3 && s[0] == "apis") {
    group = s[1];
    i = 3;
  } else {
    return false;
  }
  if (i >= s.size()) return false;  // discovery of a group/version
  bool watch = r.watch;
  if (s[i] == "watch") {  // legacy /watch/ prefix
    watch = true;
    ++i;
  }
  std::string ns;
  if (s[i] == "namespaces" && i + 2 < s.size()) {
    ns = s[i + 1];
    i += 2;
  }
  if (i >= s.size()) return false;
  std::string resource = s[i];
  std::string name = i + 1 < s.size() ? s[i + 1] : "";
  if (i + 2 < s.size()) resource += "/" + s[i + 2];
  std::string verb;
  if (r.method == "GET" || r.method == "HEAD") {
    verb = watch ? "watch" : name.empty() ? "list" : "get";
  } else if (r.method == "POST") {
    verb = "create";
  } else if (r.method == "PUT") {
    verb = "update";
  } else if (r.method == "PATCH") {
    verb = "patch";
  } else if (r.method == "DELETE") {
    verb = name.empty() ? "deletecollection" : "delete";
  } else {
    verb = r.method;
  }
  *out = {verb, group, resource, ns};
  return true;
}

bool PublicNonResource(const std::string& path) {
  static const std::regex re(R"(^/(api|apis|version|healthz|livez|readyz|openapi)(/.*)?$)");
  return std::regex_match(path, re);
}

std::vector<Grant> Grants(const Rendered& r) {
  const json& sa = r.One("ServiceAccount");
  const std::string sa_name = sa["metadata"]["name"], sa_ns = sa["metadata"]["namespace"];
  std::vector<Grant> out;
  auto bound = [&](const json& binding, const std::string& kind, const std::string& name) {
    if (binding["roleRef"]["kind"] != kind || binding["roleRef"]["name"] != name) return false;
    EXPECT_EQ(binding["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    for (const auto& s : binding["subjects"]) {
      if (s["kind"] == "ServiceAccount" && s["name"] == sa_name && s["namespace"] == sa_ns) return true;
    }
    return false;
  };
  auto add = [&](const Doc& role, const std::string& ns) {
    for (const auto& rule : role.obj["rules"]) {
      Grant g;
      g.ns = ns;
      g.source = role.source + " " + role.obj["kind"].get<std::string>() + "/" +
                 role.obj["metadata"]["name"].get<std::string>();
      for (const auto& v : rule["verbs"]) g.verbs.insert(v.get<std::string>());
      for (const auto& v : rule["apiGroups"]) g.groups.insert(v.get<std::string>());
      for (const auto& v : rule["resources"]) g.resources.insert(v.get<std::string>());
      EXPECT_FALSE(g.verbs.count("*") || g.groups.count("*") || g.resources.count("*")) << g.source << ": wildcard";
      EXPECT_FALSE(rule.contains("nonResourceURLs")) << g.source;
      out.push_back(g);
    }
  };
  for (const auto* role : r.Kind("ClusterRole")) {
    int n = 0;
    for (const auto* b : r.Kind("ClusterRoleBinding")) n += bound(b->obj, "ClusterRole", role->obj["metadata"]["name"]);
    EXPECT_EQ(n, 1) << role->source << ": ClusterRole not bound to the ServiceAccount exactly once";
    add(*role, "");
  }
  for (const auto* role : r.Kind("Role")) {
    int n = 0;
    for (const auto* b : r.Kind("RoleBinding")) {
      if (b->obj["metadata"]["namespace"] == role->obj["metadata"]["namespace"]) {
        n += bound(b->obj, "Role", role->obj["metadata"]["name"]);
      }
    }
    EXPECT_EQ(n, 1) << role->source << ": Role not bound to the ServiceAccount exactly once";
    add(*role, role->obj["metadata"]["namespace"]);
  }
  return out;
}

bool Allows(const Grant& g, const Permission& p) {
  const auto& [verb, group, resource, ns] = p;
  return g.verbs.count(verb) && g.groups.count(group) && g.resources.count(resource) && (g.ns.empty() || g.ns == ns);
}

}  // namespace tfjob::charts
