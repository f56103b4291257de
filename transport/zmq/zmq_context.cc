#include "transport/zmq/zmq_context.h"

#include <unistd.h>
#include <zmq.h>

#include <cstring>
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

bool TakeMonitorEvent(void* monitor, MonitorEvent* event) {
  zmq_msg_t frame;
  zmq_msg_init(&frame);
  if (zmq_msg_recv(&frame, monitor, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&frame);
    return false;
  }
  *event = MonitorEvent{};
  if (zmq_msg_size(&frame) >= 6) {  // 16-bit id, 32-bit value
    std::memcpy(&event->id, zmq_msg_data(&frame), sizeof(event->id));
    std::memcpy(&event->value, static_cast<const char*>(zmq_msg_data(&frame)) + 2, sizeof(event->value));
  }
  const bool more = zmq_msg_more(&frame);
  zmq_msg_close(&frame);
  if (more) {  // the second frame: the endpoint
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, monitor, 0) >= 0) {
      event->address.assign(static_cast<const char*>(zmq_msg_data(&frame)), zmq_msg_size(&frame));
    }
    zmq_msg_close(&frame);
  }
  return true;
}

}  // namespace curelay::transport
