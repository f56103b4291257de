// User objects (cuUserObjectCreate, cuUserObjectRetain/Release, cuGraphRetainUserObject/ReleaseUserObject): a
// reference count and a destructor, which the executor's driver never needs to see, so they live in the client,
// where the destructor runs (on a thread of its own, as the driver's internal thread would: it may not call CUDA).
// References are held by the application, by graphs (their own, and for each child graph node the references its
// graph had when it was copied in), by executable graphs (those of their graph at instantiation or at the last
// cuGraphExecUpdate) and by each launch until its work is done, so an executable graph destroyed while it runs keeps
// its objects alive until then, as natively.
#include <thread>
#include <unordered_set>

#include "frontend/api/graph_support.h"
#include "frontend/api/host_functions.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

struct CUuserObject_st {
  void* pointer;
  CUhostFn destroy;
  std::atomic<uint64_t> references;
};

namespace {

constexpr unsigned int kMostReferences = 0x7fffffff;  // INT_MAX, the driver's bound on counts

struct UserObjectRegistry {
  std::mutex mutex;
  std::unordered_set<CUuserObject> live;
};

UserObjectRegistry& Registry() {
  static auto* registry = new UserObjectRegistry;  // never destroyed: destructors may run during exit
  return *registry;
}

bool Live(CUuserObject object) {
  UserObjectRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return object != nullptr && registry.live.count(object) != 0;
}

void Release(CUuserObject object, uint64_t count) {
  if (object->references.fetch_sub(count) != count) return;
  {
    UserObjectRegistry& registry = Registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.live.erase(object);
  }
  std::thread([object] {
    object->destroy(object->pointer);
    delete object;
  }).detach();
}

}  // namespace

namespace curelay::frontend {

void RetainUserObjects(const UserObjectRefs& references) {
  for (const auto& [object, count] : references) object->references.fetch_add(count);
}

void ReleaseUserObjects(const UserObjectRefs& references) {
  for (const auto& [object, count] : references) Release(object, count);
}

void AddUserObjects(UserObjectRefs* to, const UserObjectRefs& from) {
  for (const auto& [object, count] : from) (*to)[object] += count;
}

UserObjectRefs CollectUserObjects(CUgraph graph) {
  UserObjectRefs references;
  std::vector<CUgraph> owned;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    AddUserObjects(&references, graph->user_objects);
    for (const auto& [node, held] : graph->node_user_objects) AddUserObjects(&references, held);
    owned = graph->moved_children;
  }
  for (CUgraph child : owned) AddUserObjects(&references, CollectUserObjects(child));
  return references;
}

void ReleaseGraphUserObjects(CUgraph graph) {
  UserObjectRefs references;
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    references.swap(graph->user_objects);
    for (auto& [node, held] : graph->node_user_objects) AddUserObjects(&references, held);
    graph->node_user_objects.clear();
  }
  ReleaseUserObjects(references);
}

void ReleaseNodeUserObjects(CUgraphNode node) {
  UserObjectRefs references;
  {
    std::lock_guard<std::mutex> lock(node->graph->mutex);
    const auto held = node->graph->node_user_objects.find(node->id);
    if (held == node->graph->node_user_objects.end()) return;
    references.swap(held->second);
    node->graph->node_user_objects.erase(held);
  }
  ReleaseUserObjects(references);
}

void CopyUserObjectsInto(CUgraph graph, uint64_t node, const UserObjectRefs& references) {
  if (references.empty()) return;
  RetainUserObjects(references);
  std::lock_guard<std::mutex> lock(graph->mutex);
  AddUserObjects(&graph->node_user_objects[node], references);
}

CUresult HoldUserObjectsForLaunch(const UserObjectRefs& references, CUstream stream) {
  if (references.empty()) return CUDA_SUCCESS;
  RetainUserObjects(references);
  const CUresult result = LaunchInternalHostFunction(stream, [references] { ReleaseUserObjects(references); });
  if (result != CUDA_SUCCESS) {
    Log().warn("user objects: cannot hold references until the launch is done ({}); released now",
               static_cast<int>(result));
    ReleaseUserObjects(references);
  }
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend

extern "C" {

CUresult cuUserObjectCreate(CUuserObject* object_out, void* pointer, CUhostFn destroy, unsigned int initial_references,
                            unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (object_out == nullptr || destroy == nullptr || initial_references == 0 ||
      initial_references > kMostReferences || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* object = new CUuserObject_st{pointer, destroy, {initial_references}};
  {
    UserObjectRegistry& registry = Registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.live.insert(object);
  }
  *object_out = object;
  return CUDA_SUCCESS;
}

CUresult cuUserObjectRetain(CUuserObject object, unsigned int count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (count == 0 || count > kMostReferences || !Live(object)) return CUDA_ERROR_INVALID_VALUE;
  object->references.fetch_add(count);
  return CUDA_SUCCESS;
}

// Releasing more references than the caller owns is undefined natively; here it is refused when the object does
// not have that many.
CUresult cuUserObjectRelease(CUuserObject object, unsigned int count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (count == 0 || count > kMostReferences || !Live(object) || object->references.load() < count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Release(object, count);
  return CUDA_SUCCESS;
}

CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (graph == nullptr || !Graphs().graphs.Contains(graph) || count == 0 || count > kMostReferences ||
      !Live(object) || (flags != 0 && flags != CU_GRAPH_USER_OBJECT_MOVE)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (flags != CU_GRAPH_USER_OBJECT_MOVE) object->references.fetch_add(count);  // moved: the caller's become the graph's
  std::lock_guard<std::mutex> lock(graph->mutex);
  graph->user_objects[object] += count;
  return CUDA_SUCCESS;
}

CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (graph == nullptr || !Graphs().graphs.Contains(graph) || count == 0 || count > kMostReferences ||
      !Live(object)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    const auto held = graph->user_objects.find(object);
    if (held == graph->user_objects.end() || held->second < count) return CUDA_ERROR_INVALID_VALUE;
    held->second -= count;
    if (held->second == 0) graph->user_objects.erase(held);
  }
  Release(object, count);
  return CUDA_SUCCESS;
}

}  // extern "C"
