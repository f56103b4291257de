#include "transport/rdma/verbs_api.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace curelay::transport {
namespace {

// The real exported functions behind the inline/macro forms of verbs.h, resolved by name.
struct Resolved {
  int (*query_port)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;
};
Resolved resolved;

int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) {
  // As verbs.h's ___ibv_query_port does for a provider without the extended query: the exported symbol takes the
  // compat struct, which is the prefix of ibv_port_attr.
  std::memset(attr, 0, sizeof(*attr));
  return resolved.query_port(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}
int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) { return ibv_post_send(qp, wr, bad_wr); }
int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) { return ibv_post_recv(qp, wr, bad_wr); }
int PollCq(ibv_cq* cq, int entries, ibv_wc* wc) { return ibv_poll_cq(cq, entries, wc); }
int ReqNotifyCq(ibv_cq* cq, int solicited_only) { return ibv_req_notify_cq(cq, solicited_only); }

template <typename Function>
bool Bind(void* library, const char* name, Function* slot, bool required, std::string* missing) {
  *slot = reinterpret_cast<Function>(dlsym(library, name));
  if (*slot == nullptr && required) {
    *missing = name;
    return false;
  }
  return true;
}

VerbsApi table;
std::string load_error;
const VerbsApi* loaded = nullptr;

void Load() {
  void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    load_error = std::string("cannot load libibverbs.so.1 (rdma-core): ") + (why != nullptr ? why : "unknown");
    return;
  }
  std::string missing;
  const bool ok = Bind(library, "ibv_get_device_list", &table.get_device_list, true, &missing) &&
                  Bind(library, "ibv_free_device_list", &table.free_device_list, true, &missing) &&
                  Bind(library, "ibv_get_device_name", &table.get_device_name, true, &missing) &&
                  Bind(library, "ibv_open_device", &table.open_device, true, &missing) &&
                  Bind(library, "ibv_close_device", &table.close_device, true, &missing) &&
                  Bind(library, "ibv_query_port", &resolved.query_port, true, &missing) &&
                  Bind(library, "ibv_query_gid", &table.query_gid, true, &missing) &&
                  Bind(library, "ibv_alloc_pd", &table.alloc_pd, true, &missing) &&
                  Bind(library, "ibv_dealloc_pd", &table.dealloc_pd, true, &missing) &&
                  Bind(library, "ibv_reg_mr", &table.reg_mr, true, &missing) &&
                  Bind(library, "ibv_reg_dmabuf_mr", &table.reg_dmabuf_mr, false, &missing) &&
                  Bind(library, "ibv_dereg_mr", &table.dereg_mr, true, &missing) &&
                  Bind(library, "ibv_create_comp_channel", &table.create_comp_channel, true, &missing) &&
                  Bind(library, "ibv_destroy_comp_channel", &table.destroy_comp_channel, true, &missing) &&
                  Bind(library, "ibv_create_cq", &table.create_cq, true, &missing) &&
                  Bind(library, "ibv_destroy_cq", &table.destroy_cq, true, &missing) &&
                  Bind(library, "ibv_create_qp", &table.create_qp, true, &missing) &&
                  Bind(library, "ibv_modify_qp", &table.modify_qp, true, &missing) &&
                  Bind(library, "ibv_destroy_qp", &table.destroy_qp, true, &missing) &&
                  Bind(library, "ibv_get_cq_event", &table.get_cq_event, true, &missing) &&
                  Bind(library, "ibv_ack_cq_events", &table.ack_cq_events, true, &missing);
  if (!ok) {
    load_error = "libibverbs.so.1 lacks " + missing;
    dlclose(library);
    return;
  }
  table.query_port = QueryPort;
  table.post_send = PostSend;
  table.post_recv = PostRecv;
  table.poll_cq = PollCq;
  table.req_notify_cq = ReqNotifyCq;
  loaded = &table;  // the library stays loaded for the life of the process
}

}  // namespace

const VerbsApi* LoadVerbsApi(std::string* error) {
  static std::once_flag once;
  std::call_once(once, Load);
  if (loaded == nullptr && error != nullptr) *error = load_error;
  return loaded;
}

}  // namespace curelay::transport
