#include "transport/zmq/zmq_context.h"

#include <unistd.h>
#include <zmq.h>

#include <mutex>

namespace curelay::transport {

void* ZmqContext() {
  static std::mutex mutex;
  static void* context = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (context == nullptr || owner != getpid()) {
    // The parent's context is deliberately leaked in a child: terminating it would wait on threads that no
    // longer exist in this process.
    context = zmq_ctx_new();
    zmq_ctx_set(context, ZMQ_BLOCKY, 0);  // sockets never block process exit on unsent messages
    owner = getpid();
  }
  return context;
}

}  // namespace curelay::transport
