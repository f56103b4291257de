#include "backend/hello.h"

#include "schema/wire.h"

namespace curelay::backend {

std::optional<ClientHello> DecodeHello(std::span<const uint8_t> bytes) {
  const auto* hello = wire::ParseVerified<wire::Hello>(bytes);
  if (hello == nullptr) return std::nullopt;
  const auto text = [](const flatbuffers::String* value, const char* absent) {
    return value != nullptr ? value->str() : std::string(absent);
  };
  return ClientHello{hello->protocol_version(), text(hello->tenant(), ""), hello->client_pid(),
                     text(hello->client_host(), "?"), text(hello->client_program(), "?"),
                     text(hello->curve_public_key(), "")};
}

}  // namespace curelay::backend
