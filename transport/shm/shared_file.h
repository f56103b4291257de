// Files that two processes on one host map together: the shared-memory channel's rings and mapped host memory.
// The creator makes a fresh file in a directory both can reach; the other side opens it only if it is a regular
// file of the expected name and size in the directory it trusts, maps it, and removes the name.
#pragma once

#include <cstddef>
#include <string>

namespace curelay::transport {

// Creates `directory`/`prefix`-<pid>-<random> of `bytes` bytes (mode 0600) and maps it shared, read-write.
// Returns the mapping or null with *error set; *path names the file (still linked).
void* CreateSharedFile(const std::string& directory, const char* prefix, size_t bytes, std::string* path,
                       std::string* error);

// Maps the file at `path`, which must be directly in `allowed_directory`, start with `prefix`-, and hold
// exactly `bytes` bytes. Unlinks it in every case. Returns the mapping or null with *error set. With an
// `address_hint`, the mapping is placed there if that range is free in this process (never over another mapping).
void* OpenSharedFile(const std::string& path, const std::string& allowed_directory, const char* prefix, size_t bytes,
                     std::string* error, void* address_hint = nullptr);

// Moves the `bytes`-byte mapping at `mapping` (pages and sharing alike) to `target` when that range is free in this
// process (never over another mapping); false, with the mapping where it was, otherwise. Both page-aligned.
bool MoveMapping(void* mapping, size_t bytes, void* target);

// A board every process of a backend keeps mapped (the memory quota and dispatch boards): created afresh at a
// fixed `path` (a stale file there is replaced), mode 0600, `bytes` zero-filled bytes, mapped shared. Null with
// *error set.
void* CreateNamedSharedFile(const std::string& path, size_t bytes, std::string* error);
// Maps the existing file at `path`, which must hold exactly `bytes` bytes; it stays linked for the others.
void* OpenNamedSharedFile(const std::string& path, size_t bytes, std::string* error);

}  // namespace curelay::transport
