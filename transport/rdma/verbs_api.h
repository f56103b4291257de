// Every libibverbs call the RDMA transport makes goes through one table of function pointers, filled from
// dlopen("libibverbs.so.1") the first time an rdma:// endpoint is used. Nothing links libibverbs: the shim keeps
// depending on glibc alone, and hosts without rdma-core only lose rdma:// endpoints. The structs are rdma-core's
// own (the headers are needed to build, not to run).
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace curelay::transport {

struct VerbsApi {
  ibv_device** (*get_device_list)(int* count);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* device);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*query_port)(ibv_context* context, uint8_t port, ibv_port_attr* attr);
  int (*query_gid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* address, size_t length, int access);
  // Optional (rdma-core >= 34): null when the library lacks it; GPUDirect RDMA needs it.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_comp_channel* (*create_comp_channel)(ibv_context* context);
  int (*destroy_comp_channel)(ibv_comp_channel* channel);
  ibv_cq* (*create_cq)(ibv_context* context, int entries, void* cq_context, ibv_comp_channel* channel,
                       int vector);
  int (*destroy_cq)(ibv_cq* cq);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(ibv_qp* qp);
  // The data path: static inlines in verbs.h dispatching through the context's ops; the table's entries are small
  // wrappers calling those inlines, so a provider's fast path stays what it is.
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
  int (*post_recv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  int (*poll_cq)(ibv_cq* cq, int entries, ibv_wc* wc);
  int (*req_notify_cq)(ibv_cq* cq, int solicited_only);
  int (*get_cq_event)(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
  void (*ack_cq_events)(ibv_cq* cq, unsigned int count);
};

// The process's table, loaded once (thread-safe); null with `error` set when libibverbs.so.1 cannot be loaded or
// lacks a required symbol. Which library is found follows the dynamic loader's usual search (LD_LIBRARY_PATH
// first), which is how tests put the emulated verbs fixture in its place.
const VerbsApi* LoadVerbsApi(std::string* error);

}  // namespace curelay::transport
