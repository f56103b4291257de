// The tenant registry and usage ledger: an SQLite database in WAL mode in the backend's state directory, so
// tenants and their limits survive restarts and backendctl changes are durable before they are acknowledged.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/tenants/tenant_record.h"

struct sqlite3;

namespace curelay::backend {

class TenantRegistry {
 public:
  // Opens (creating if needed) `path`; null with `error` set on failure.
  static std::unique_ptr<TenantRegistry> Open(const std::string& path, std::string* error);
  ~TenantRegistry();

  // Adds a tenant and returns its new token (the only time it exists outside the client); empty with `error` set
  // when the name is taken or a field is invalid.
  std::string Add(const TenantRecord& tenant, std::string* error);
  // Replaces the limits of an existing tenant (the name and token stay).
  bool Update(const TenantRecord& tenant, std::string* error);
  bool Remove(const std::string& name, std::string* error);
  std::optional<TenantRecord> Find(const std::string& name) const;
  std::vector<TenantRecord> List() const;
  // The tenant whose token this is, if any.
  std::optional<TenantRecord> Authenticate(const std::string& token) const;

  // Usage ledger: adds GPU time and raises the peak memory of `tenant` for the interval starting at
  // `interval_start_unix` (rows per tenant per interval, for reporting and chargeback).
  bool RecordUsage(const std::string& tenant, int64_t interval_start_unix, double gpu_seconds,
                   uint64_t peak_memory_bytes);
  struct UsageRow {
    std::string tenant;
    int64_t interval_start_unix;
    double gpu_seconds;
    uint64_t peak_memory_bytes;
  };
  std::vector<UsageRow> Usage(const std::string& tenant) const;

 private:
  explicit TenantRegistry(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

}  // namespace curelay::backend
