// Which private export table (cuGetExportTable) answers which id. Ids are the 16 bytes in the order callers pass
// them (docs/research/export-tables.md §1 explains the byte order). The lookup is a scan of a constant list: it
// works before cuInit and never talks to the executor.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>

namespace curelay::frontend {

using ExportTableId = std::array<uint8_t, 16>;

inline constexpr ExportTableId kToolsCallbackHooksTableId = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                                             0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};
inline constexpr ExportTableId kToolsTlsTableId = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                                                   0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
inline constexpr ExportTableId kContextLocalStorageTableId = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                                              0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
inline constexpr ExportTableId kContextChecksTableId = {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                                                        0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e};
inline constexpr ExportTableId kToolsContextTableId = {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                                       0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2};
// The executor asks its real driver for this one too (executor/handlers_export_tables.cc has a copy).
inline constexpr ExportTableId kClusterPrototypeTableId = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                                                           0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};
inline constexpr ExportTableId kToolsModuleTableId = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                                      0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};
// kCudartInterfaceTableId and kIntegrityTableId are in integrity_check.h, which hashes both tables' addresses.

// The table served for `id`, or nullptr when curelay refuses it. `name` (optional) receives the table's name,
// or for a table refused on purpose its name and why, or nullptr for an id nobody has identified.
const void* FindExportTable(const CUuuid& id, const char** name);

}  // namespace curelay::frontend
