// A stand-in for the backend's side of the handshake, for a test or fuzzer that checks what the shim does with a
// Welcome no real backend would send: the product's own listener (transport/listener.h) on an endpoint, answering
// each valid Hello with the Welcome bytes it was given, from a thread of its own. Header-only, so that the fuzz
// harnesses (fuzz/) can use it without the integration tests' libraries.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "schema/wire.h"
#include "transport/listener.h"

namespace curelay::testing {

class FakeBackend {
 public:
  // Listens on `endpoint` (normally ipc:// in a scratch directory); listening() says whether it could, error() why
  // not. Until SetWelcome, Hellos are answered with an empty message.
  explicit FakeBackend(const std::string& endpoint) {
    const std::string endpoints[] = {endpoint};
    listener_ = transport::Listen(endpoints, 1 << 20, &error_);
    if (listener_ != nullptr) thread_ = std::thread([this] { Serve(); });
  }
  ~FakeBackend() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }
  FakeBackend(const FakeBackend&) = delete;
  FakeBackend& operator=(const FakeBackend&) = delete;

  bool listening() const { return listener_ != nullptr; }
  const std::string& error() const { return error_; }

  // The answer to every Hello from now on; the count of Hellos starts again from zero. With `tenant`, only Hellos
  // that carry that token are counted: a caller that gives each attempt its own token (CURELAY_TOKEN) does not count
  // a late Hello of an earlier attempt, which a loaded machine can deliver after this call.
  void SetWelcome(std::span<const uint8_t> welcome, std::string tenant = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    welcome_.assign(welcome.begin(), welcome.end());
    tenant_ = std::move(tenant);
    hellos_ = 0;
  }
  // Valid Hellos answered since the last SetWelcome (with its tenant, when it named one).
  int hellos() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hellos_;
  }
  // Requests that were not a valid Hello, left unanswered, since the start: never reset, so that one noticed only
  // after a SetWelcome still counts (a shim must never send one).
  int malformed_requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return malformed_requests_;
  }

 private:
  void Serve() {
    transport::ListenerRequest request;
    while (!stopping_) {
      // Short waits, so that the destructor is not kept long; a request still ends the wait at once.
      if (listener_->Receive(request, 100) != transport::ReceiveStatus::kMessage) continue;
      const std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>(request.body.data()), request.body.size());
      const wire::Hello* hello = wire::ParseVerified<wire::Hello>(body);
      std::lock_guard<std::mutex> lock(mutex_);
      if (hello == nullptr) {
        ++malformed_requests_;
        continue;
      }
      if (tenant_.empty() || (hello->tenant() != nullptr && hello->tenant()->str() == tenant_)) ++hellos_;
      listener_->Reply(request, welcome_);
    }
  }

  std::string error_;
  std::unique_ptr<transport::Listener> listener_;  // used by the serving thread only, once that has started
  std::thread thread_;
  std::atomic<bool> stopping_ = false;
  mutable std::mutex mutex_;  // guards what follows
  std::vector<uint8_t> welcome_;
  std::string tenant_;
  int hellos_ = 0;
  int malformed_requests_ = 0;
};

}  // namespace curelay::testing
