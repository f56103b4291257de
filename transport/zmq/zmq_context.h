// The process's ZeroMQ context. A forked child gets a fresh one: a context (and its I/O thread) never survives
// fork, and the parent's sockets must not be touched by the child.
#pragma once

#include <cstdint>
#include <string>

namespace curelay::transport {

void* ZmqContext();

// One event from a socket monitor (zmq_socket_monitor), if one is waiting: its id, value and endpoint.
struct MonitorEvent {
  uint16_t id = 0;
  uint32_t value = 0;
  std::string address;
};
bool TakeMonitorEvent(void* monitor, MonitorEvent* event);

}  // namespace curelay::transport
