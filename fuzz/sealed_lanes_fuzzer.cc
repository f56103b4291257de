// lanes_channel_fuzzer with sealed lanes (CURVE sessions) and a hostile peer that holds the keys: that file's
// comment says what each operation does in this variant.
#define CURELAY_FUZZ_SEALED_LANES
#include "fuzz/lanes_channel_fuzzer.cc"  // NOLINT(bugprone-suspicious-include): one harness, two builds
