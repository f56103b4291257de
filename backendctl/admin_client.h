// The client side of the backend's admin endpoint (docs/operations.md): one JSON request, one JSON answer. Shared
// by backendctl and the Kubernetes device plugin, which creates tenants through it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace curelay::admin {

// Sends `request` ({"command": ..., "args": {...}}) and returns the backend's answer ({"ok": true, "result": ...} or
// {"ok": false, "error": ...}); a failure object of the same shape when the backend cannot be reached in
// `timeout_ms` or answers something that is not JSON. $CURELAY_ADMIN_TOKEN, when set, goes with the request (a tcp://
// admin endpoint requires it); $CURELAY_SERVER_KEY, when set, is the backend's CURVE key for a tcp:// endpoint.
nlohmann::json Ask(const std::string& endpoint, nlohmann::json request, int timeout_ms = 5000);

// A byte count as administrators type it: digits with an optional K, M, G, T (or KiB...) suffix (powers of 1024).
bool ParseBytes(const std::string& text, uint64_t* bytes);

}  // namespace curelay::admin
