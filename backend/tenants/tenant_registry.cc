#include "backend/tenants/tenant_registry.h"

#include <sqlite3.h>

#include <ctime>

#include "backend/tenants/tenant_token.h"
#include "common/gpu_list.h"

namespace curelay::backend {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS tenants (
  name TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL UNIQUE,
  priority TEXT NOT NULL,
  weight INTEGER NOT NULL,
  memory_quota_bytes INTEGER NOT NULL,
  memory_policy TEXT NOT NULL,
  wait_timeout_ms INTEGER NOT NULL,
  max_sessions INTEGER NOT NULL,
  gpus TEXT NOT NULL,
  created_unix INTEGER NOT NULL,
  mps_sm_percent INTEGER NOT NULL DEFAULT 0,
  mps_memory_limit_bytes INTEGER NOT NULL DEFAULT 0,
  switch_time_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS usage (
  tenant TEXT NOT NULL,
  interval_start_unix INTEGER NOT NULL,
  gpu_seconds REAL NOT NULL DEFAULT 0,
  peak_memory_bytes INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant, interval_start_unix)
);
)sql";

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &statement_, nullptr); }
  ~Statement() { sqlite3_finalize(statement_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return statement_ != nullptr; }
  Statement& Bind(int index, const std::string& text) {
    sqlite3_bind_text(statement_, index, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Bind(int index, int64_t value) {
    sqlite3_bind_int64(statement_, index, value);
    return *this;
  }
  Statement& Bind(int index, double value) {
    sqlite3_bind_double(statement_, index, value);
    return *this;
  }
  int Step() { return statement_ != nullptr ? sqlite3_step(statement_) : SQLITE_ERROR; }
  std::string Text(int column) const {
    const auto* text = sqlite3_column_text(statement_, column);
    return text != nullptr ? reinterpret_cast<const char*>(text) : "";
  }
  int64_t Int(int column) const { return sqlite3_column_int64(statement_, column); }
  double Real(int column) const { return sqlite3_column_double(statement_, column); }

 private:
  sqlite3_stmt* statement_ = nullptr;
};

// The registry stores "every GPU" as an empty column. A column that does not parse (edited by hand) reads as a list
// naming no valid GPU, which the broker refuses: a damaged restriction never widens to every GPU.
std::string JoinGpus(const std::vector<int>& gpus) { return gpus.empty() ? std::string() : FormatGpuList(gpus); }

std::vector<int> SplitGpus(const std::string& text) {
  if (text.empty()) return {};
  return ParseGpuList(text).value_or(std::vector<int>{-1});
}

// Columns added after the first release, for registries created before them (each ALTER fails harmlessly once
// the column exists).
constexpr const char* kAddedColumns[] = {
    "ALTER TABLE tenants ADD COLUMN mps_sm_percent INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE tenants ADD COLUMN mps_memory_limit_bytes INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE tenants ADD COLUMN switch_time_ms INTEGER NOT NULL DEFAULT 0",
};

constexpr const char* kColumns =
    "name, priority, weight, memory_quota_bytes, memory_policy, wait_timeout_ms, max_sessions, gpus, created_unix, "
    "mps_sm_percent, mps_memory_limit_bytes, switch_time_ms";

TenantRecord ReadTenant(const Statement& row) {
  TenantRecord tenant;
  tenant.name = row.Text(0);
  tenant.priority = row.Text(1);
  tenant.weight = static_cast<uint32_t>(row.Int(2));
  tenant.memory_quota_bytes = static_cast<uint64_t>(row.Int(3));
  tenant.memory_policy = row.Text(4);
  tenant.wait_timeout_ms = static_cast<uint32_t>(row.Int(5));
  tenant.max_sessions = static_cast<uint32_t>(row.Int(6));
  tenant.gpus = SplitGpus(row.Text(7));
  tenant.created_unix = row.Int(8);
  tenant.mps_sm_percent = static_cast<uint32_t>(row.Int(9));
  tenant.mps_memory_limit_bytes = static_cast<uint64_t>(row.Int(10));
  tenant.switch_time_ms = static_cast<uint32_t>(row.Int(11));
  return tenant;
}

}  // namespace

std::unique_ptr<TenantRegistry> TenantRegistry::Open(const std::string& path, std::string* error) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    *error = "cannot open " + path + ": " + (db != nullptr ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return nullptr;
  }
  sqlite3_busy_timeout(db, 5000);
  char* message = nullptr;
  // WAL: readers (backendctl-driven queries) never block the writer; synchronous=FULL makes every acknowledged
  // change survive a power cut.
  if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", nullptr, nullptr, &message) !=
          SQLITE_OK ||
      sqlite3_exec(db, kSchema, nullptr, nullptr, &message) != SQLITE_OK) {
    *error = std::string("cannot set up ") + path + ": " + (message != nullptr ? message : "unknown error");
    sqlite3_free(message);
    sqlite3_close(db);
    return nullptr;
  }
  for (const char* added : kAddedColumns) sqlite3_exec(db, added, nullptr, nullptr, nullptr);
  return std::unique_ptr<TenantRegistry>(new TenantRegistry(db));
}

TenantRegistry::~TenantRegistry() { sqlite3_close(db_); }

std::string TenantRegistry::Add(const TenantRecord& tenant, std::string* error) {
  if (std::string invalid = ValidateTenant(tenant); !invalid.empty()) {
    *error = invalid;
    return {};
  }
  if (Find(tenant.name)) {
    *error = "tenant '" + tenant.name + "' exists";
    return {};
  }
  const std::string token = NewTenantToken();
  Statement insert(db_, "INSERT INTO tenants (name, token_hash, priority, weight, memory_quota_bytes, "
                        "memory_policy, wait_timeout_ms, max_sessions, gpus, created_unix, mps_sm_percent, "
                        "mps_memory_limit_bytes, switch_time_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.Bind(1, tenant.name).Bind(2, HashTenantToken(token)).Bind(3, tenant.priority);
  insert.Bind(4, int64_t{tenant.weight}).Bind(5, static_cast<int64_t>(tenant.memory_quota_bytes));
  insert.Bind(6, tenant.memory_policy).Bind(7, int64_t{tenant.wait_timeout_ms});
  insert.Bind(8, int64_t{tenant.max_sessions}).Bind(9, JoinGpus(tenant.gpus));
  insert.Bind(10, static_cast<int64_t>(std::time(nullptr))).Bind(11, int64_t{tenant.mps_sm_percent});
  insert.Bind(12, static_cast<int64_t>(tenant.mps_memory_limit_bytes)).Bind(13, int64_t{tenant.switch_time_ms});
  if (insert.Step() != SQLITE_DONE) {
    *error = std::string("database: ") + sqlite3_errmsg(db_);
    return {};
  }
  return token;
}

bool TenantRegistry::Update(const TenantRecord& tenant, std::string* error) {
  if (std::string invalid = ValidateTenant(tenant); !invalid.empty()) {
    *error = invalid;
    return false;
  }
  Statement update(db_, "UPDATE tenants SET priority = ?, weight = ?, memory_quota_bytes = ?, memory_policy = ?, "
                        "wait_timeout_ms = ?, max_sessions = ?, gpus = ?, mps_sm_percent = ?, "
                        "mps_memory_limit_bytes = ?, switch_time_ms = ? WHERE name = ?");
  update.Bind(1, tenant.priority).Bind(2, int64_t{tenant.weight});
  update.Bind(3, static_cast<int64_t>(tenant.memory_quota_bytes)).Bind(4, tenant.memory_policy);
  update.Bind(5, int64_t{tenant.wait_timeout_ms}).Bind(6, int64_t{tenant.max_sessions});
  update.Bind(7, JoinGpus(tenant.gpus)).Bind(8, int64_t{tenant.mps_sm_percent});
  update.Bind(9, static_cast<int64_t>(tenant.mps_memory_limit_bytes)).Bind(10, int64_t{tenant.switch_time_ms});
  update.Bind(11, tenant.name);
  if (update.Step() != SQLITE_DONE) {
    *error = std::string("database: ") + sqlite3_errmsg(db_);
    return false;
  }
  if (sqlite3_changes(db_) == 0) {
    *error = "no tenant '" + tenant.name + "'";
    return false;
  }
  return true;
}

bool TenantRegistry::Remove(const std::string& name, std::string* error) {
  Statement remove(db_, "DELETE FROM tenants WHERE name = ?");
  remove.Bind(1, name);
  if (remove.Step() != SQLITE_DONE) {
    *error = std::string("database: ") + sqlite3_errmsg(db_);
    return false;
  }
  if (sqlite3_changes(db_) == 0) {
    *error = "no tenant '" + name + "'";
    return false;
  }
  return true;
}

std::optional<TenantRecord> TenantRegistry::Find(const std::string& name) const {
  Statement find(db_, (std::string("SELECT ") + kColumns + " FROM tenants WHERE name = ?").c_str());
  find.Bind(1, name);
  if (find.Step() != SQLITE_ROW) return std::nullopt;
  return ReadTenant(find);
}

std::vector<TenantRecord> TenantRegistry::List() const {
  Statement list(db_, (std::string("SELECT ") + kColumns + " FROM tenants ORDER BY name").c_str());
  std::vector<TenantRecord> tenants;
  while (list.Step() == SQLITE_ROW) tenants.push_back(ReadTenant(list));
  return tenants;
}

std::optional<TenantRecord> TenantRegistry::Authenticate(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  Statement find(db_, (std::string("SELECT ") + kColumns + " FROM tenants WHERE token_hash = ?").c_str());
  find.Bind(1, HashTenantToken(token));
  if (find.Step() != SQLITE_ROW) return std::nullopt;
  return ReadTenant(find);
}

bool TenantRegistry::RecordUsage(const std::string& tenant, int64_t interval_start_unix, double gpu_seconds,
                                 uint64_t peak_memory_bytes) {
  Statement upsert(db_, "INSERT INTO usage (tenant, interval_start_unix, gpu_seconds, peak_memory_bytes) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, interval_start_unix) DO UPDATE SET "
                        "gpu_seconds = gpu_seconds + excluded.gpu_seconds, "
                        "peak_memory_bytes = MAX(peak_memory_bytes, excluded.peak_memory_bytes)");
  upsert.Bind(1, tenant).Bind(2, interval_start_unix).Bind(3, gpu_seconds);
  upsert.Bind(4, static_cast<int64_t>(peak_memory_bytes));
  return upsert.Step() == SQLITE_DONE;
}

std::vector<TenantRegistry::UsageRow> TenantRegistry::Usage(const std::string& tenant) const {
  Statement select(db_, "SELECT tenant, interval_start_unix, gpu_seconds, peak_memory_bytes FROM usage "
                        "WHERE tenant = ? ORDER BY interval_start_unix");
  select.Bind(1, tenant);
  std::vector<UsageRow> rows;
  while (select.Step() == SQLITE_ROW) {
    rows.push_back({select.Text(0), select.Int(1), select.Real(2), static_cast<uint64_t>(select.Int(3))});
  }
  return rows;
}

}  // namespace curelay::backend
