// The process's ZeroMQ context. A forked child gets a fresh one: a context (and its I/O thread) never survives
// fork, and the parent's sockets must not be touched by the child.
#pragma once

namespace curelay::transport {

void* ZmqContext();

}  // namespace curelay::transport
