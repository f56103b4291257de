// The private export tables (cuGetExportTable) through the shim, with a real backend and executor on the emulated
// driver: what the CUDA runtime and the math libraries find in each table the shim serves
// (frontend/export_tables/, docs/research/export-tables.md).
#include <cuda.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "frontend/export_tables/integrity_check.h"
#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

// Two devices, so the integrity check covers more than one device record.
const auto* const environment = AddSessionEnvironment("export-tables", {{"CURELAY_EMU_DEVICE_COUNT", "2"}});

// Table ids in the byte order callers pass them.
constexpr std::string_view kCudartInterface = "6bd5fb6c5bf4e74a8987d93912fd9df9";
constexpr std::string_view kToolsCallbackHooks = "a094798c2e742e7493f20800200c0a66";
constexpr std::string_view kToolsTls = "42d85a8123f6cb478298f6e78a3aecdc";
constexpr std::string_view kContextLocalStorage = "c693336e1121df11a8c368f355d89593";
constexpr std::string_view kContextChecks = "263e88607cd2614392f6bbd5006dfa7e";
constexpr std::string_view kIntegrity = "d4082055bde6704b8d34ba123c66e1f2";
constexpr std::string_view kToolsContext = "21318c60971432488ca641ff7324c8f2";
constexpr std::string_view kToolsModule = "6e163fbeb958444d835ce182aff1991e";
constexpr std::string_view kClusterPrototype = "1734dc26800d47458726c0f1e7dd8bca";

CUuuid Id(std::string_view hex) {
  CUuuid id;
  for (int i = 0; i < 16; ++i) id.bytes[i] = static_cast<char>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  return id;
}

const void* const* Table(std::string_view hex) {
  const void* table = nullptr;
  const CUuuid id = Id(hex);
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_SUCCESS) << hex;
  return static_cast<const void* const*>(table);
}

template <typename Function>
Function Slot(std::string_view table, size_t slot) {
  return reinterpret_cast<Function>(const_cast<void*>(Table(table)[slot]));
}

using NoArguments = CUresult (*)();
using IntegrityCheck = CUresult (*)(uint32_t, uint64_t, uint64_t*);
using GetPrimaryContext = CUresult (*)(CUcontext*, CUdevice);
using LoadFatBinary = CUresult (*)(CUmodule*, const void*);
using LoadWithRelocations = CUresult (*)(CUmodule*, const void*, const void*, const void*, unsigned int);
using LoadHidden = CUresult (*)(const void*, CUmodule*, const void*, const void*, unsigned int);
using FatCubinDestroyed = CUresult (*)(const void*);
using GetEnableBuffer = void* (*)(void**, size_t*);
using SetCurrent = CUresult (*)(CUcontext);
using SetEnabled = CUresult (*)(int);
using GetCurrent = CUresult (*)(CUcontext*);
using StorageDestructor = void (*)(CUcontext, void*, void*);
using StorageRegister = CUresult (*)(CUcontext, void*, void*, StorageDestructor);
using StorageUnregister = CUresult (*)(CUcontext, void*);
using StorageGet = CUresult (*)(void**, CUcontext, void*);
using GetContextType = CUresult (*)(CUcontext, uint32_t*, void**);
using GreenSupport = uint32_t (*)();
using GetContextDevice = CUresult (*)(CUcontext, uint32_t*);
using GetContextId = CUresult (*)(CUcontext, uint64_t*);
using SynchronizeContext = CUresult (*)(CUcontext);
using GetTpcMapping = CUresult (*)(unsigned char**, unsigned char**);
using FreeTpcMapping = CUresult (*)(unsigned char*, unsigned char*);
using ClusterLaunchSupported = CUresult (*)(CUdevice, int*);

// What the runtime would compute: the integrity answer over everything this process is shown.
std::array<uint64_t, 2> ExpectedIntegrityAnswer(uint32_t version, uint64_t seconds) {
  int driver_version = 0, count = 0;
  EXPECT_EQ(cuDriverGetVersion(&driver_version), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  std::vector<frontend::IntegrityDevice> devices(count);
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUuuid uuid;
    EXPECT_EQ(cuDeviceGetUuid(&uuid, ordinal), CUDA_SUCCESS);
    std::memcpy(devices[ordinal].uuid.data(), uuid.bytes, 16);
    EXPECT_EQ(cuDeviceGetAttribute(&devices[ordinal].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, ordinal),
              CUDA_SUCCESS);
    EXPECT_EQ(cuDeviceGetAttribute(&devices[ordinal].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, ordinal), CUDA_SUCCESS);
    EXPECT_EQ(cuDeviceGetAttribute(&devices[ordinal].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, ordinal),
              CUDA_SUCCESS);
  }
  frontend::IntegrityInputs inputs;
  inputs.driver_version = static_cast<uint32_t>(driver_version);
  inputs.version = version;
  inputs.unix_seconds = seconds;
  inputs.process_id = static_cast<uint32_t>(getpid());
  inputs.thread_id = static_cast<uint32_t>(pthread_self());
  inputs.integrity_table = reinterpret_cast<uintptr_t>(Table(kIntegrity));
  inputs.cudart_interface_table = reinterpret_cast<uintptr_t>(Table(kCudartInterface));
  inputs.check_function = reinterpret_cast<uintptr_t>(Table(kIntegrity)[1]);
  inputs.devices = devices;
  return frontend::ComputeIntegrityCheck(inputs);
}

// First in the file: in a process of its own (as ctest runs each test) nothing has called cuInit yet.
TEST(ExportTablesBeforeInit, ServedWithoutASession) {
  CUcontext current;
  if (cuCtxGetCurrent(&current) != CUDA_ERROR_NOT_INITIALIZED) GTEST_SKIP() << "cuInit already ran in this process";
  for (std::string_view id : {kCudartInterface, kToolsCallbackHooks, kToolsTls, kContextLocalStorage, kContextChecks,
                              kIntegrity, kToolsContext, kClusterPrototype, kToolsModule}) {
    EXPECT_NE(Table(id), nullptr) << id;
  }
  // The real driver answers the integrity check with NOT_INITIALIZED and zeros before cuInit.
  uint64_t out[2] = {~uint64_t{0}, ~uint64_t{0}};
  EXPECT_EQ(Slot<IntegrityCheck>(kIntegrity, 1)(13002, 1700000000, out), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 0u);
  void* value = reinterpret_cast<void*>(1);
  int key;
  EXPECT_EQ(Slot<StorageGet>(kContextLocalStorage, 2)(&value, nullptr, &key), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(Slot<GetCurrent>(kToolsTls, 2)(&current), CUDA_ERROR_NOT_INITIALIZED);
  void* buffer = nullptr;
  size_t count = 0;
  EXPECT_NE(Slot<GetEnableBuffer>(kToolsCallbackHooks, 2)(&buffer, &count), nullptr);
  EXPECT_EQ(count, 1024u);
}

class ExportTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
  }
  void TearDown() override { cuDevicePrimaryCtxRelease(0); }

  CUcontext context_ = nullptr;
};

TEST_F(ExportTablesTest, SizeWordsAndSlots) {
  struct Expected {
    std::string_view id;
    size_t words;
  };
  for (const Expected& table : {Expected{kCudartInterface, 13}, Expected{kToolsCallbackHooks, 7},
                                Expected{kToolsTls, 3}, Expected{kContextChecks, 15}, Expected{kIntegrity, 3},
                                Expected{kToolsContext, 95}, Expected{kClusterPrototype, 17},
                                Expected{kToolsModule, 99}}) {
    SCOPED_TRACE(table.id);
    const void* const* words = Table(table.id);
    ASSERT_NE(words, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(words[0]), table.words * sizeof(void*));
    for (size_t slot = 1; slot < table.words; ++slot) {
      // The driver's CudartInterface has a NULL in word 10; every other word of these tables is a function.
      const bool null_in_driver = table.id == kCudartInterface && slot == 10;
      EXPECT_EQ(words[slot] == nullptr, null_in_driver) << "slot " << slot;
    }
  }
  // Context-local storage has no size word: three functions, then NULL.
  const void* const* storage = Table(kContextLocalStorage);
  for (size_t word = 0; word < 3; ++word) EXPECT_NE(storage[word], nullptr) << word;
  EXPECT_EQ(storage[3], nullptr);
  // One table per id for the whole process.
  EXPECT_EQ(Table(kIntegrity), Table(kIntegrity));
  EXPECT_EQ(Table(kCudartInterface), Table(kCudartInterface));
}

TEST_F(ExportTablesTest, RefusedAndUnknownTablesGetTheDriversAnswerForAMissingTable) {
  for (std::string_view id : {std::string_view("f8cff95121468b4eb9e2fb469e7c0dd9"),
                              std::string_view("da9151d33ae6cc41a5c04f26d533e328"),
                              std::string_view("69a28e9f24498b47b030c5da330ea4e9"),
                              std::string_view("123456789abcdef00fedcba987654321")}) {
    const void* table = reinterpret_cast<const void*>(1);
    const CUuuid uuid = Id(id);
    EXPECT_EQ(cuGetExportTable(&table, &uuid), CUDA_ERROR_INVALID_VALUE) << id;
    EXPECT_EQ(table, nullptr) << id;
  }
  const CUuuid uuid = Id(kIntegrity);
  const void* table = nullptr;
  EXPECT_EQ(cuGetExportTable(nullptr, &uuid), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetExportTable(&table, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ExportTablesTest, UnimplementedSlotsAnswerNotSupported) {
  EXPECT_EQ(Slot<NoArguments>(kCudartInterface, 3)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kCudartInterface, 12)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kToolsCallbackHooks, 1)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kContextChecks, 1)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kContextChecks, 14)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kToolsContext, 7)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kToolsContext, 94)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kClusterPrototype, 1)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<NoArguments>(kClusterPrototype, 16)(), CUDA_ERROR_NOT_SUPPORTED);
  // Called twice: the log line comes once, the answer every time.
  EXPECT_EQ(Slot<NoArguments>(kClusterPrototype, 16)(), CUDA_ERROR_NOT_SUPPORTED);
}

TEST_F(ExportTablesTest, CudartInterfaceGivesThePrimaryContext) {
  const auto get = Slot<GetPrimaryContext>(kCudartInterface, 2);
  CUcontext primary = nullptr;
  ASSERT_CU(get(&primary, 0));
  EXPECT_EQ(primary, context_);
  // Device 1's primary context has not been retained: the handle exists anyway, and a retain hands out the same one.
  CUcontext second = nullptr;
  ASSERT_CU(get(&second, 1));
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second, primary);
  unsigned int flags = 0;
  int active = 1;
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 0);  // not retained by asking
  CUcontext retained = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&retained, 1));
  EXPECT_EQ(retained, second);
  ASSERT_CU(cuDevicePrimaryCtxRelease(1));
  EXPECT_EQ(get(&primary, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(get(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ExportTablesTest, CudartInterfaceLoadsFatbins) {
  std::ifstream file(CURELAY_TEST_FATBIN_PATH, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty()) << CURELAY_TEST_FATBIN_PATH;
  std::vector<uint64_t> fatbin((bytes.size() + 7) / 8);
  std::memcpy(fatbin.data(), bytes.data(), bytes.size());
  struct {
    uint32_t magic;
    int32_t version;
    const void* data;
    const void* fatbins;
  } wrapper = {0x466243B1, 1, fatbin.data(), nullptr};

  auto check_module = [](CUmodule module) {
    CUfunction fill = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&fill, module, "fill_u32"), CUDA_SUCCESS);
    EXPECT_NE(fill, nullptr);
    EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  };
  CUmodule module = nullptr;
  ASSERT_CU(Slot<LoadFatBinary>(kCudartInterface, 1)(&module, &wrapper));
  check_module(module);
  ASSERT_CU(Slot<LoadWithRelocations>(kCudartInterface, 6)(&module, &wrapper, nullptr, nullptr, 0));
  check_module(module);
  ASSERT_CU(Slot<LoadHidden>(kCudartInterface, 8)(fatbin.data(), &module, nullptr, nullptr, 0));
  check_module(module);
  EXPECT_EQ(Slot<FatCubinDestroyed>(kCudartInterface, 7)(&wrapper), CUDA_SUCCESS);

  // What cannot be loaded plainly is refused rather than guessed at.
  const char* names[] = {"symbol"};
  void* addresses[] = {nullptr};
  EXPECT_EQ(Slot<LoadWithRelocations>(kCudartInterface, 6)(&module, &wrapper, names, addresses, 1),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Slot<LoadHidden>(kCudartInterface, 8)(fatbin.data(), &module, names, addresses, 1),
            CUDA_ERROR_NOT_SUPPORTED);
  const uint64_t not_a_wrapper[4] = {};
  EXPECT_EQ(Slot<LoadFatBinary>(kCudartInterface, 1)(&module, not_a_wrapper), CUDA_ERROR_NOT_SUPPORTED);
  auto linked = wrapper;
  linked.version = 2;
  linked.fatbins = names;
  EXPECT_EQ(Slot<LoadFatBinary>(kCudartInterface, 1)(&module, &linked), CUDA_ERROR_NOT_SUPPORTED);
}

// ToolsModule slot 7, as cuFFT calls it after loading each module: the callback gets every function of the module
// (the same objects cuModuleEnumerateFunctions and cuModuleGetFunction hand out), and the count comes back.
TEST_F(ExportTablesTest, ToolsModuleEnumeratesAModulesFunctions) {
  std::ifstream file(CURELAY_TEST_FATBIN_PATH, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(image.empty()) << CURELAY_TEST_FATBIN_PATH;
  CUmodule module = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, image.data()));
  unsigned int count = 0;
  ASSERT_CU(cuModuleGetFunctionCount(&count, module));
  ASSERT_GE(count, 4u);
  std::vector<CUfunction> listed(count);
  ASSERT_CU(cuModuleEnumerateFunctions(listed.data(), count, module));
  std::vector<CUfunction> too_many(count + 1);
  EXPECT_EQ(cuModuleEnumerateFunctions(too_many.data(), count + 1, module), CUDA_ERROR_INVALID_VALUE);
  CUfunction fill = nullptr;
  for (CUfunction function : listed) {
    const char* name = nullptr;
    ASSERT_CU(cuFuncGetName(&name, function));
    CUfunction by_name = nullptr;
    ASSERT_CU(cuModuleGetFunction(&by_name, module, name));
    EXPECT_EQ(by_name, function) << name;
    if (std::string_view(name) == "fill_u32") fill = function;
  }
  ASSERT_NE(fill, nullptr);

  using Callback = void (*)(void*, CUfunction);
  using Enumerate = int (*)(CUcontext, CUmodule, Callback, void*);
  const Callback record = [](void* user, CUfunction function) {
    static_cast<std::vector<CUfunction>*>(user)->push_back(function);
  };
  std::vector<CUfunction> seen;
  EXPECT_EQ(Slot<Enumerate>(kToolsModule, 7)(context_, module, record, &seen), static_cast<int>(count));
  EXPECT_EQ(seen, listed);
  seen.clear();
  EXPECT_EQ(Slot<Enumerate>(kToolsModule, 7)(context_, nullptr, record, &seen), 0);
  EXPECT_TRUE(seen.empty());

  // A function found this way launches like any other.
  CUdeviceptr target = 0;
  const unsigned long long n = 1000;
  unsigned value = 0x5eed;
  ASSERT_CU(cuMemAlloc(&target, n * 4));
  void* params[] = {&target, &value, const_cast<unsigned long long*>(&n)};
  ASSERT_CU(cuLaunchKernel(fill, 8, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  std::vector<unsigned> back(n);
  ASSERT_CU(cuMemcpyDtoH(back.data(), target, n * 4));
  for (unsigned word : back) ASSERT_EQ(word, value);
  ASSERT_CU(cuMemFree(target));
  ASSERT_CU(cuModuleUnload(module));
}

TEST_F(ExportTablesTest, ToolsCallbackHooksServeZeroedEnableBuffers) {
  for (const auto& [slot, entries] : {std::pair<size_t, size_t>{2, 1024}, std::pair<size_t, size_t>{6, 14}}) {
    SCOPED_TRACE(slot);
    void* buffer = nullptr;
    size_t count = 0;
    void* returned = Slot<GetEnableBuffer>(kToolsCallbackHooks, slot)(&buffer, &count);
    ASSERT_NE(buffer, nullptr);
    EXPECT_EQ(returned, buffer);  // the driver leaves the buffer in the return register too
    EXPECT_EQ(count, entries);
    const auto* words = static_cast<const uint64_t*>(buffer);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(words[i], 0u) << i;
    void* again = nullptr;
    Slot<GetEnableBuffer>(kToolsCallbackHooks, slot)(&again, &count);
    EXPECT_EQ(again, buffer);
  }
}

TEST_F(ExportTablesTest, ToolsTlsIsTheThreadsCurrentContext) {
  const auto get = Slot<GetCurrent>(kToolsTls, 2);
  const auto set = Slot<SetCurrent>(kToolsTls, 1);
  CUcontext seen = nullptr, current = nullptr;
  ASSERT_CU(get(&seen));
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(seen, current);
  EXPECT_EQ(seen, context_);
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
  ASSERT_CU(set(context_));
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context_);
  ASSERT_CU(set(created));
  ASSERT_CU(get(&seen));
  EXPECT_EQ(seen, created);
  std::thread other([&] {
    CUcontext none = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(get(&none), CUDA_SUCCESS);
    EXPECT_EQ(none, nullptr);
  });
  other.join();
  EXPECT_EQ(get(nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuCtxDestroy(created));
  ASSERT_CU(cuCtxSetCurrent(context_));
}

struct DestructorCall {
  CUcontext context;
  void* key;
  void* value;
};
std::vector<DestructorCall> destructor_calls;
void RecordDestructor(CUcontext context, void* key, void* value) { destructor_calls.push_back({context, key, value}); }

TEST_F(ExportTablesTest, ContextLocalStorage) {
  const auto register_value = Slot<StorageRegister>(kContextLocalStorage, 0);
  const auto unregister = Slot<StorageUnregister>(kContextLocalStorage, 1);
  const auto get = Slot<StorageGet>(kContextLocalStorage, 2);
  destructor_calls.clear();
  int key_a, key_b, value_a, value_b;
  void* value = reinterpret_cast<void*>(1);

  // Missing keys: INVALID_HANDLE with NULL written (measured).
  EXPECT_EQ(get(&value, nullptr, &key_a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(value, nullptr);

  // NULL means the current context.
  ASSERT_CU(register_value(nullptr, &key_a, &value_a, nullptr));
  ASSERT_CU(get(&value, context_, &key_a));
  EXPECT_EQ(value, &value_a);
  ASSERT_CU(get(&value, nullptr, &key_a));
  EXPECT_EQ(value, &value_a);

  // Entries are per context and per key.
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));  // now current
  EXPECT_EQ(get(&value, nullptr, &key_a), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(register_value(created, &key_a, &value_b, &RecordDestructor));
  ASSERT_CU(register_value(nullptr, &key_b, &value_a, &RecordDestructor));
  ASSERT_CU(get(&value, created, &key_a));
  EXPECT_EQ(value, &value_b);
  ASSERT_CU(get(&value, context_, &key_a));
  EXPECT_EQ(value, &value_a);

  // A thread without a current context: INVALID_CONTEXT (measured).
  std::thread other([&] {
    void* seen = nullptr;
    EXPECT_EQ(get(&seen, nullptr, &key_a), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(register_value(nullptr, &key_a, &value_a, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_CU(get(&seen, created, &key_a));  // an explicit context works from any thread
    EXPECT_EQ(seen, &value_b);
  });
  other.join();

  // Unregistering takes the value back without its destructor.
  ASSERT_CU(unregister(created, &key_b));
  EXPECT_EQ(get(&value, created, &key_b), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(unregister(created, &key_b), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(register_value(created, &key_b, &value_a, &RecordDestructor));
  EXPECT_TRUE(destructor_calls.empty());

  // Destroying the context runs each of its destructors once, with the context, key and value; others stay.
  ASSERT_CU(cuCtxDestroy(created));
  ASSERT_EQ(destructor_calls.size(), 2u);
  for (const DestructorCall& call : destructor_calls) {
    EXPECT_EQ(call.context, created);
    EXPECT_TRUE((call.key == &key_a && call.value == &value_b) || (call.key == &key_b && call.value == &value_a));
  }
  EXPECT_NE(destructor_calls[0].key, destructor_calls[1].key);
  EXPECT_EQ(get(&value, created, &key_a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(register_value(created, &key_a, &value_a, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
  ASSERT_CU(get(&value, nullptr, &key_a));
  EXPECT_EQ(value, &value_a);
  ASSERT_CU(unregister(nullptr, &key_a));
  EXPECT_EQ(get(nullptr, nullptr, &key_a), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ExportTablesTest, ContextLocalStorageEndsWithThePrimaryContext) {
  const auto register_value = Slot<StorageRegister>(kContextLocalStorage, 0);
  const auto get = Slot<StorageGet>(kContextLocalStorage, 2);
  destructor_calls.clear();
  int key, value;
  void* seen = nullptr;

  // cuDevicePrimaryCtxReset (cudaDeviceReset) destroys the context's state: the destructors run.
  ASSERT_CU(register_value(context_, &key, &value, &RecordDestructor));
  ASSERT_CU(cuDevicePrimaryCtxReset(0));
  ASSERT_EQ(destructor_calls.size(), 1u);
  EXPECT_EQ(destructor_calls[0].context, context_);
  EXPECT_EQ(destructor_calls[0].key, &key);
  EXPECT_EQ(destructor_calls[0].value, &value);
  EXPECT_EQ(get(&seen, context_, &key), CUDA_ERROR_INVALID_HANDLE);

  // So does the last release, which destroys the driver's primary context; earlier releases do not.
  ASSERT_CU(register_value(context_, &key, &value, &RecordDestructor));
  CUcontext again = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&again, 0));
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  EXPECT_EQ(destructor_calls.size(), 1u);
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  EXPECT_EQ(destructor_calls.size(), 2u);
  ASSERT_CU(cuDevicePrimaryCtxRetain(&again, 0));  // for TearDown's release
  EXPECT_EQ(again, context_);
}

TEST_F(ExportTablesTest, ContextChecksDescribeAnOrdinaryContext) {
  uint32_t type = 7;
  void* green = reinterpret_cast<void*>(1);
  ASSERT_CU(Slot<GetContextType>(kContextChecks, 2)(context_, &type, &green));
  EXPECT_EQ(type, 0u);
  EXPECT_EQ(green, nullptr);
  EXPECT_EQ(Slot<GreenSupport>(kContextChecks, 3)(), 0u);
}

TEST_F(ExportTablesTest, IntegrityCheckCoversWhatTheClientSees) {
  const auto check = Slot<IntegrityCheck>(kIntegrity, 1);
  uint64_t out[2] = {};
  for (uint32_t version : {13002u, 13003u, 12082u}) {
    SCOPED_TRACE(version);
    ASSERT_CU(check(version, 1700000000, out));
    EXPECT_EQ((std::array<uint64_t, 2>{out[0], out[1]}), ExpectedIntegrityAnswer(version, 1700000000));
  }
  // The answer covers the calling thread: another thread gets its own, and it matches what that thread computes.
  const std::array<uint64_t, 2> here = {out[0], out[1]};
  std::thread other([&] {
    uint64_t theirs[2] = {};
    ASSERT_CU(check(12082, 1700000000, theirs));
    EXPECT_EQ((std::array<uint64_t, 2>{theirs[0], theirs[1]}), ExpectedIntegrityAnswer(12082, 1700000000));
    EXPECT_NE((std::array<uint64_t, 2>{theirs[0], theirs[1]}), here);
  });
  other.join();
  // Versions ending in 0 and 1 have fixed answers.
  ASSERT_CU(check(13000, 1700000000, out));
  EXPECT_EQ(out[0], 0x3341181c03cb675cu);
  EXPECT_EQ(out[1], 0x8ed383aa1f4cd1e8u);
  ASSERT_CU(check(13001, 1700000000, out));
  EXPECT_EQ(out[0], 0x1841181c03cb675cu);
  EXPECT_EQ(out[1], 0x8ed383aa1f4cd1e8u);
  EXPECT_EQ(Slot<SetEnabled>(kIntegrity, 2)(1), CUDA_SUCCESS);  // slot 2: a no-op
}

TEST_F(ExportTablesTest, ToolsContextMapsStreams) {
  using GetToolsHandleEx = CUresult (*)(CUcontext, CUstream, CUstream*, uint8_t);
  using StreamQuery = CUresult (*)(CUcontext, CUstream);
  using IsNonBlocking = CUresult (*)(CUstream, uint8_t*);
  using GetStreamId = CUresult (*)(CUcontext, CUstream, uint64_t*);
  const auto tools_handle = Slot<GetToolsHandleEx>(kToolsContext, 51);
  const auto query = Slot<StreamQuery>(kToolsContext, 2);
  const auto non_blocking = Slot<IsNonBlocking>(kToolsContext, 32);
  const auto stream_id = Slot<GetStreamId>(kToolsContext, 39);
  CUstream tools = nullptr;
  ASSERT_CU(tools_handle(nullptr, nullptr, &tools, 0));
  EXPECT_EQ(tools, CU_STREAM_LEGACY);
  ASSERT_CU(tools_handle(nullptr, nullptr, &tools, 1));
  EXPECT_EQ(tools, CU_STREAM_PER_THREAD);
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(tools_handle(nullptr, stream, &tools, 0));
  EXPECT_EQ(tools, stream);
  ASSERT_CU(query(nullptr, tools));
  uint8_t flag = 0;
  ASSERT_CU(non_blocking(tools, &flag));
  EXPECT_EQ(flag, 1);
  uint64_t id = 0, public_id = 0;
  ASSERT_CU(stream_id(nullptr, tools, &id));
  unsigned long long from_api = 0;
  ASSERT_CU(cuStreamGetId(stream, &from_api));
  public_id = from_api;
  EXPECT_EQ(id, public_id);
  EXPECT_EQ(tools_handle(nullptr, reinterpret_cast<CUstream>(&flag), &tools, 0), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(ExportTablesTest, ToolsContextDescribesContexts) {
  const auto device_of = Slot<GetContextDevice>(kToolsContext, 3);
  const auto id_of = Slot<GetContextId>(kToolsContext, 4);
  const auto synchronize = Slot<SynchronizeContext>(kToolsContext, 6);
  uint32_t ordinal = 9;
  ASSERT_CU(device_of(nullptr, &ordinal));
  EXPECT_EQ(ordinal, 0u);
  uint64_t primary_id = 0, current_id = 0;
  ASSERT_CU(id_of(context_, &primary_id));
  ASSERT_CU(id_of(nullptr, &current_id));
  EXPECT_GE(primary_id, 1u);
  EXPECT_EQ(current_id, primary_id);

  // Contexts are numbered in creation order, each once.
  CUcontext first = nullptr, second = nullptr;
  ASSERT_CU(cuCtxCreate(&first, nullptr, 0, 1));
  ASSERT_CU(cuCtxCreate(&second, nullptr, 0, 0));
  uint64_t first_id = 0, second_id = 0;
  ASSERT_CU(id_of(first, &first_id));
  ASSERT_CU(id_of(second, &second_id));
  EXPECT_GT(first_id, primary_id);
  EXPECT_GT(second_id, first_id);
  // cuCtxGetId answers the same ids (the current context for a null one).
  unsigned long long public_id = 0;
  ASSERT_CU(cuCtxGetId(first, &public_id));
  EXPECT_EQ(public_id, first_id);
  ASSERT_CU(cuCtxGetId(nullptr, &public_id));
  EXPECT_EQ(public_id, second_id);
  EXPECT_EQ(cuCtxGetId(first, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(device_of(first, &ordinal));
  EXPECT_EQ(ordinal, 1u);

  // Synchronizing another context leaves the calling thread's current one alone.
  ASSERT_CU(synchronize(first));
  ASSERT_CU(synchronize(nullptr));
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, second);

  ASSERT_CU(cuCtxDestroy(second));
  ASSERT_CU(cuCtxDestroy(first));
  EXPECT_EQ(id_of(first, &first_id), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxGetId(first, &public_id), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(synchronize(first), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
  std::thread other([&] {
    EXPECT_EQ(id_of(nullptr, &current_id), CUDA_ERROR_INVALID_CONTEXT);
    unsigned long long none = 0;
    EXPECT_EQ(cuCtxGetId(nullptr, &none), CUDA_ERROR_INVALID_CONTEXT);
  });
  other.join();
}

TEST_F(ExportTablesTest, ClusterPrototypeForwardsTheTpcMapping) {
  const auto get = Slot<GetTpcMapping>(kClusterPrototype, 4);
  const auto release = Slot<FreeTpcMapping>(kClusterPrototype, 13);
  // The emulated driver's fixed arrays (tests/emulated_driver/README.md): 66 TPCs, vGPC tpc % 8, mTPC tpc / 8.
  constexpr size_t kTpcs = 66;
  for (int round = 0; round < 2; ++round) {  // the second answer comes from the client's cache
    SCOPED_TRACE(round);
    unsigned char* vgpc = nullptr;
    unsigned char* mtpc = nullptr;
    ASSERT_CU(get(&vgpc, &mtpc));
    ASSERT_NE(vgpc, nullptr);
    ASSERT_NE(mtpc, nullptr);
    EXPECT_GE(malloc_usable_size(vgpc), kTpcs);
    EXPECT_GE(malloc_usable_size(mtpc), kTpcs);
    for (size_t tpc = 0; tpc < kTpcs; ++tpc) {
      ASSERT_EQ(vgpc[tpc], tpc % 8) << tpc;
      ASSERT_EQ(mtpc[tpc], tpc / 8) << tpc;
    }
    ASSERT_CU(release(vgpc, mtpc));
  }
  // The other device's context asks the executor again.
  CUcontext other_device = nullptr;
  ASSERT_CU(cuCtxCreate(&other_device, nullptr, 0, 1));
  unsigned char* vgpc = nullptr;
  unsigned char* mtpc = nullptr;
  ASSERT_CU(get(&vgpc, &mtpc));
  EXPECT_EQ(mtpc[kTpcs - 1], (kTpcs - 1) / 8);
  ASSERT_CU(release(vgpc, mtpc));
  ASSERT_CU(cuCtxDestroy(other_device));
  ASSERT_CU(cuCtxSetCurrent(context_));
  std::thread no_context([&] { EXPECT_EQ(get(&vgpc, &mtpc), CUDA_ERROR_INVALID_CONTEXT); });
  no_context.join();

  // Slot 8 is the device attribute the client already has.
  for (CUdevice device : {0, 1}) {
    int supported = -1, attribute = -2;
    ASSERT_CU(Slot<ClusterLaunchSupported>(kClusterPrototype, 8)(device, &supported));
    ASSERT_CU(cuDeviceGetAttribute(&attribute, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, device));
    EXPECT_EQ(supported, attribute);
  }
}

}  // namespace
}  // namespace curelay::testing
