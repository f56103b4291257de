// Tenant tokens: the secret a client presents in its handshake. A token is shown once, when its tenant is created;
// the registry keeps only its SHA-256, so a stolen database does not hand out access.
#pragma once

#include <string>

namespace curelay::backend {

// A fresh token: "crl_" and 64 hex digits of 32 random bytes from the kernel.
std::string NewTenantToken();
// The hex SHA-256 of a token, as stored.
std::string HashTenantToken(const std::string& token);

}  // namespace curelay::backend
