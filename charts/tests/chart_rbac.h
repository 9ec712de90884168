// RBAC as chart_rbac_test compares it: a request to the API server as the
// permission it needs (Kubernetes' request-info rules), and the rules a
// rendered chart binds to its ServiceAccount. Failure: a malformed rule or
// binding is a test failure (gtest EXPECTs) in the calling test.
#pragma once

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "charts/tests/chart_render.h"

namespace tfjob::charts {

// (verb, apiGroup, resource[/subresource], namespace; "" = cluster-wide)
using Permission = std::tuple<std::string, std::string, std::string, std::string>;

std::string Str(const Permission& p);

// What a request log says of one request.
struct Request {
  std::string method;  // GET, POST, ...
  std::string path;    // URL path, no query
  bool watch = false;  // a GET with watch=1|true
};

// Kubernetes' request-info rules (k8s.io/apiserver/pkg/endpoints/request).
// Returns false for non-resource URLs (discovery, /version).
bool ToPermission(const Request& r, Permission* out);

// Paths every authenticated user may GET (system:discovery,
// system:public-info-viewer): not the chart's to grant.
bool PublicNonResource(const std::string& path);

struct Grant {
  std::set<std::string> verbs, groups, resources;
  std::string ns;  // "" = every namespace (ClusterRole via ClusterRoleBinding)
  std::string source;
};

// The rules bound to the operator's ServiceAccount.
std::vector<Grant> Grants(const Rendered& r);

bool Allows(const Grant& g, const Permission& p);

}  // namespace tfjob::charts
