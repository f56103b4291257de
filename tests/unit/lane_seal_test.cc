// LaneSeal (transport/lanes/lane_seal.h): what one library seals the other opens, for each cipher (so the wire does
// not depend on which library either end loaded), in place and out of place; a piece opens only as the next one of
// its own lane and direction; keys and hello tokens differ per lane and direction.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "transport/lanes/lane_seal.h"

namespace curelay::transport {
namespace {

LaneSecret TestSecret(uint8_t seed) {
  LaneSecret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(seed + i * 11);
  return secret;
}

std::vector<uint8_t> Bytes(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>((i * 131 + seed) >> 2);
  return bytes;
}

struct Case {
  LaneCipher cipher;
  LaneCryptoLibrary sealer, opener;
};

std::vector<Case> RunnableCases() {
  std::vector<Case> cases;
  for (const LaneCipher cipher : {LaneCipher::kAes256Gcm, LaneCipher::kChaCha20Poly1305}) {
    for (const LaneCryptoLibrary sealer : {LaneCryptoLibrary::kLibcrypto, LaneCryptoLibrary::kLibsodium}) {
      for (const LaneCryptoLibrary opener : {LaneCryptoLibrary::kLibcrypto, LaneCryptoLibrary::kLibsodium}) {
        if (LaneCipherAvailable(cipher, sealer) && LaneCipherAvailable(cipher, opener)) {
          cases.push_back({cipher, sealer, opener});
        }
      }
    }
  }
  return cases;
}

TEST(LaneSealTest, WhatOneLibrarySealsTheOtherOpens) {
  const std::vector<Case> cases = RunnableCases();
  // libsodium runs ChaCha20-Poly1305 everywhere; libcrypto where libcrypto.so.3 loads (libssl3, which
  // tools/install-deps.sh installs with libssl-dev): both pairings of the two libraries at least.
  ASSERT_TRUE(LaneCipherAvailable(LaneCipher::kChaCha20Poly1305, LaneCryptoLibrary::kLibcrypto))
      << "libcrypto.so.3 does not load here";
  ASSERT_GE(cases.size(), 4u);
  const LaneSecret secret = TestSecret(3);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(LaneCipherName(c.cipher)) + " sealed by " + std::string(LaneCryptoLibraryName(c.sealer)) +
                 ", opened by " + std::string(LaneCryptoLibraryName(c.opener)));
    LaneSeal sealing(c.cipher, secret, 2, true, c.sealer);
    LaneSeal opening(c.cipher, secret, 2, true, c.opener);
    ASSERT_EQ(sealing.library(), c.sealer);
    ASSERT_EQ(opening.library(), c.opener);
    for (const size_t size : {size_t{16}, size_t{1}, size_t{65536}, size_t{65536 - 7}}) {
      const std::vector<uint8_t> plain = Bytes(size, static_cast<uint8_t>(size));
      std::vector<uint8_t> sealed(size), in_place = plain;
      uint8_t tag[LaneSeal::kTagBytes], in_place_tag[LaneSeal::kTagBytes];
      ASSERT_TRUE(sealing.Seal(plain.data(), sealed.data(), size, tag));
      EXPECT_NE(sealed, plain);
      ASSERT_TRUE(opening.Open(sealed.data(), size, tag));
      EXPECT_EQ(sealed, plain);
      // In place, as the lanes open pieces where they landed (the next nonce on both sides).
      ASSERT_TRUE(sealing.Seal(in_place.data(), in_place.data(), size, in_place_tag));
      ASSERT_TRUE(opening.Open(in_place.data(), size, in_place_tag));
      EXPECT_EQ(in_place, plain);
    }
  }
}

TEST(LaneSealTest, APieceOpensOnlyAsTheNextOfItsOwnLaneAndDirection) {
  for (const LaneCipher cipher : {LaneCipher::kAes256Gcm, LaneCipher::kChaCha20Poly1305}) {
    if (!LaneCipherAvailable(cipher)) continue;
    SCOPED_TRACE(std::string(LaneCipherName(cipher)));
    const LaneSecret secret = TestSecret(9);
    const std::vector<uint8_t> plain = Bytes(4096, 1);
    const auto seal_one = [&](LaneSeal& sealing, std::vector<uint8_t>& out, uint8_t* tag) {
      out.resize(plain.size());
      ASSERT_TRUE(sealing.Seal(plain.data(), out.data(), plain.size(), tag));
    };
    std::vector<uint8_t> piece;
    uint8_t tag[LaneSeal::kTagBytes];
    {  // another lane, the other direction, another session's secret: none opens it
      LaneSeal sealing(cipher, secret, 0, true);
      seal_one(sealing, piece, tag);
      for (auto* opening : {new LaneSeal(cipher, secret, 1, true), new LaneSeal(cipher, secret, 0, false),
                            new LaneSeal(cipher, TestSecret(10), 0, true)}) {
        std::vector<uint8_t> copy = piece;
        EXPECT_FALSE(opening->Open(copy.data(), copy.size(), tag));
        delete opening;
      }
    }
    {  // the second piece before the first, and the first twice
      LaneSeal sealing(cipher, secret, 0, true);
      std::vector<uint8_t> first, second;
      uint8_t first_tag[LaneSeal::kTagBytes], second_tag[LaneSeal::kTagBytes];
      seal_one(sealing, first, first_tag);
      seal_one(sealing, second, second_tag);
      LaneSeal reordered(cipher, secret, 0, true);
      EXPECT_FALSE(reordered.Open(second.data(), second.size(), second_tag));
      LaneSeal replayed(cipher, secret, 0, true);
      std::vector<uint8_t> again = first;
      EXPECT_TRUE(replayed.Open(first.data(), first.size(), first_tag));
      EXPECT_FALSE(replayed.Open(again.data(), again.size(), first_tag));
    }
  }
}

TEST(LaneSealTest, HelloTokensDifferPerLaneAndSessionAndFromTheSecret) {
  const LaneSecret secret = TestSecret(5);
  const LaneSecret zero = LaneHelloToken(secret, 0), one = LaneHelloToken(secret, 1);
  EXPECT_NE(zero, one);
  EXPECT_NE(zero, secret);
  EXPECT_EQ(zero, LaneHelloToken(secret, 0));
  EXPECT_NE(zero, LaneHelloToken(TestSecret(6), 0));
}

TEST(LaneSealTest, CiphersAreNamedAndParsed) {
  for (const LaneCipher cipher : {LaneCipher::kAes256Gcm, LaneCipher::kChaCha20Poly1305}) {
    EXPECT_EQ(ParseLaneCipher(LaneCipherName(cipher)), cipher);
  }
  EXPECT_FALSE(ParseLaneCipher("AES256GCM").has_value());
  EXPECT_FALSE(ParseLaneCipher("").has_value());
  EXPECT_TRUE(LaneCipherAvailable(LaneCipher::kChaCha20Poly1305));
  EXPECT_TRUE(LaneCipherAvailable(PreferredLaneCipher()));
}

}  // namespace
}  // namespace curelay::transport
