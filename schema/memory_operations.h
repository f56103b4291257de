// Stream memory operations (cuStreamBatchMemOp's CUstreamBatchMemOpParams) as the wire carries them
// (MemoryOperation), both ways. The union's layout is read in one place: the shim encodes a batch (cuStreamBatchMemOp,
// batch memory-operation nodes) and decodes a node's parameters; the executor decodes what it hands its driver and
// encodes what its driver answers.
#pragma once

#include <cuda.h>

#include <cstring>

#include "schema/wire.h"
#include "schema/wire_enum.h"

namespace curelay::wire {

// False for an operation type that cuda.h does not name.
inline bool EncodeMemoryOperation(const CUstreamBatchMemOpParams& op, MemoryOperation* out) {
  switch (op.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      *out = MemoryOperation(op.operation, op.waitValue.flags, op.waitValue.address,
                             op.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? op.waitValue.value
                                                                           : op.waitValue.value64);
      return true;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      *out = MemoryOperation(op.operation, op.writeValue.flags, op.writeValue.address,
                             op.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? op.writeValue.value
                                                                            : op.writeValue.value64);
      return true;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      *out = MemoryOperation(op.operation, op.flushRemoteWrites.flags, 0, 0);
      return true;
    case CU_STREAM_MEM_OP_BARRIER:
      *out = MemoryOperation(op.operation, op.memoryBarrier.flags, 0, 0);
      return true;
    default:
      return false;
  }
}

// False for an operation type that cuda.h does not name (a malformed or hostile message).
inline bool DecodeMemoryOperation(const MemoryOperation& wire_op, CUstreamBatchMemOpParams* op) {
  std::memset(op, 0, sizeof *op);  // every byte, so two decodes of one operation compare equal byte for byte
  if (!WireEnum(wire_op.operation(), CU_STREAM_MEM_OP_BARRIER, &op->operation)) return false;
  switch (op->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      op->waitValue.address = wire_op.address();
      op->waitValue.value64 = wire_op.value();  // the 32-bit value shares its low bytes
      if (op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32) op->waitValue.value = static_cast<cuuint32_t>(wire_op.value());
      op->waitValue.flags = wire_op.flags();
      return true;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      op->writeValue.address = wire_op.address();
      op->writeValue.value64 = wire_op.value();
      if (op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32) {
        op->writeValue.value = static_cast<cuuint32_t>(wire_op.value());
      }
      op->writeValue.flags = wire_op.flags();
      return true;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      op->flushRemoteWrites.flags = wire_op.flags();
      return true;
    case CU_STREAM_MEM_OP_BARRIER:
      op->memoryBarrier.flags = wire_op.flags();
      return true;
    default:
      return false;
  }
}

}  // namespace curelay::wire
