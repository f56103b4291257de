// Graph state shared by frontend/api/graph.cc and frontend/api/stream_capture.cc: the live graph, graph-exec and
// graph-node handles. Graphs and execs get ids from the client (like streams, so creating one needs no round trip);
// node handles are made on first sight of an executor node id and die with their graph.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/client/handle_registry.h"

namespace curelay::frontend {

struct GraphRegistries {
  HandleRegistry<CUgraph_st> graphs;
  HandleRegistry<CUgraphExec_st> execs;
  HandleRegistry<CUgraphNode_st> nodes;
  std::mutex by_id_mutex;
  std::unordered_map<uint64_t, CUgraph> by_id;  // live graphs by id (capture info names a graph by id)
};

// The process's registries; a forked child starts with empty ones (its parent's handles mean nothing to its own
// session).
GraphRegistries& Graphs();

// A new client graph object (no message: the caller tells the executor about it).
CUgraph CreateGraphObject(uint64_t id);
// The live graph object with this id, or null.
CUgraph FindGraphObject(uint64_t id);
// Frees the client graph object and every node handle of it (no message).
void DestroyGraphObject(CUgraph graph);
// The handle of executor node `id` in `graph`, created on first sight.
CUgraphNode InternGraphNode(CUgraph graph, uint64_t id, CUgraphNodeType type);
// Dependencies as the wire carries them: node ids, and edge data only when some edge is not a default one.
// CUDA_ERROR_INVALID_VALUE for a null or unknown node, or one of another graph than `graph` (null: any graph).
struct WireDependencies {
  std::vector<uint64_t> ids;
  std::vector<wire::GraphEdge> edges;  // empty: all default
};
CUresult EncodeDependencies(CUgraph graph, const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                            size_t count, WireDependencies* encoded);
// Node handles for a wire node list (ids and types of one graph).
std::vector<CUgraphNode> InternGraphNodes(CUgraph graph, const wire::GraphNodes* nodes);

// Whether any stream of this process is capturing (stream_capture.cc): copies that would stage through reused
// buffers take the paths a capture can replay instead. Lock-free.
bool CapturesActive();

}  // namespace curelay::frontend
