// What the controller's caches keep of each object (the informers'
// transforms, as controller-runtime's cache.TransformFunc): only what the
// planner and reconciler read, so 10,000 cached pods fit in tens of MiB
// (docs/operations.md). Pure functions; any JSON in, never throw.
#pragma once

#include <nlohmann/json.hpp>

namespace tfjob::op::controller {

// Of a pod: metadata's name, namespace, uid, resourceVersion, labels and
// deletionTimestamp, and of its ownerReferences the controller's uid; the
// tensorflow container's task-token variable name, if it has one; status'
// phase, of container and init-container statuses their name,
// restartCount, and which state and lastState (a terminated one's exit
// code, reason and message, a waiting one's reason and message); of the
// conditions only the newest (the one ViewPod reports).
nlohmann::json CachedPod(nlohmann::json pod);
// Of a service: the same metadata, nothing else.
nlohmann::json CachedService(nlohmann::json service);
// A node: its name, resourceVersion and Ready condition (ViewNode's).
nlohmann::json CachedNode(nlohmann::json node);
// A TFJob less managedFields and kubectl's last-applied-configuration.
nlohmann::json CachedJob(nlohmann::json job);

}  // namespace tfjob::op::controller
