// Stream-ordered allocation from each device's default pool. Allocations the client has not freed are freed at
// session end (ReleasePoolAllocations); cuMemFree accepts them and waits for the work that may use them.
#include "backend/executor/session.h"

namespace curelay::executor {
namespace {

// The attributes whose value is an int; the rest are cuuint64_t.
bool IntAttribute(CUmemPool_attribute attribute) {
  return attribute == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
         attribute == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

}  // namespace

Session::Outcome Session::MemAllocAsync(const wire::MemAllocAsync& call) {
  if (driver_.cuMemAllocAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  Outcome outcome;
  outcome.result = LookupStream(call.stream(), &stream);
  if (outcome.result != CUDA_SUCCESS) return outcome;
  CUdeviceptr ptr = 0;
  outcome.result = driver_.cuMemAllocAsync(&ptr, call.bytes(), stream);
  if (outcome.result == CUDA_SUCCESS) pool_allocations_[ptr] = call.bytes();
  outcome.body = wire::CreatePointer(builder_, ptr, call.bytes()).Union();
  outcome.body_type = wire::ReplyBody::Pointer;
  return outcome;
}

Session::Outcome Session::MemFreeAsync(const wire::MemFreeAsync& call) {
  if (driver_.cuMemFreeAsync == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  CUresult result = LookupStream(call.stream(), &stream);
  if (result == CUDA_SUCCESS) result = driver_.cuMemFreeAsync(call.ptr(), stream);
  if (result == CUDA_SUCCESS) pool_allocations_.erase(call.ptr());
  return {result};
}

Session::Outcome Session::MemPoolAttribute(const wire::MemPoolAttribute& call) {
  if (driver_.cuDeviceGetDefaultMemPool == nullptr || driver_.cuMemPoolGetAttribute == nullptr ||
      driver_.cuMemPoolSetAttribute == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUmemoryPool pool = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuDeviceGetDefaultMemPool(&pool, call.device());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  const auto attribute = static_cast<CUmemPool_attribute>(call.attribute());
  int int_value = static_cast<int>(call.value());
  cuuint64_t wide_value = call.value();
  void* value = IntAttribute(attribute) ? static_cast<void*>(&int_value) : static_cast<void*>(&wide_value);
  if (call.set()) return {driver_.cuMemPoolSetAttribute(pool, attribute, value)};
  outcome.result = driver_.cuMemPoolGetAttribute(pool, attribute, value);
  const int64_t answer = IntAttribute(attribute) ? int_value : static_cast<int64_t>(wide_value);
  outcome.body = wire::CreateIntegerValue(builder_, answer).Union();
  outcome.body_type = wire::ReplyBody::IntegerValue;
  return outcome;
}

Session::Outcome Session::MemPoolTrimTo(const wire::MemPoolTrimTo& call) {
  if (driver_.cuDeviceGetDefaultMemPool == nullptr || driver_.cuMemPoolTrimTo == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  CUmemoryPool pool = nullptr;
  CUresult result = driver_.cuDeviceGetDefaultMemPool(&pool, call.device());
  if (result == CUDA_SUCCESS) result = driver_.cuMemPoolTrimTo(pool, call.min_bytes_to_keep());
  return {result};
}

void Session::ReleasePoolAllocations() {
  for (const auto& [ptr, bytes] : pool_allocations_) driver_.cuMemFree(ptr);
  pool_allocations_.clear();
}

}  // namespace curelay::executor
