// The backend's long-term CURVE key pair (docs/security.md): made on first start in <state_dir>/curve/, owner-only,
// and used by its listeners and, through a file they read, by its executors.
#pragma once

#include <string>

#include "transport/channel.h"

namespace curelay::backend {

// Reads <state_dir>/curve/server.secret (making the pair if there is none) and fills keys.server_*; `secret_path`
// is the file executors are given. False with `error` when the pair cannot be read or made.
bool LoadOrCreateServerKeys(const std::string& state_dir, transport::CurveKeys* keys, std::string* secret_path,
                            std::string* error);

}  // namespace curelay::backend
