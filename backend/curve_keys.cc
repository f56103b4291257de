#include "backend/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "transport/zmq/zmq_curve.h"

namespace curelay::backend {
namespace {

bool WriteFile(const std::string& path, const std::string& text, mode_t mode, std::string* error) {
  const std::string temporary = path + ".new";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  const std::string line = text + "\n";
  if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || fsync(fd) != 0 ||
      close(fd) != 0 || rename(temporary.c_str(), path.c_str()) != 0) {
    *error = path + ": " + strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

bool LoadOrCreateServerKeys(const std::string& state_dir, transport::CurveKeys* keys, std::string* secret_path,
                            std::string* error) {
  const std::string directory = state_dir + "/curve";
  if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = directory + ": " + strerror(errno);
    return false;
  }
  chmod(directory.c_str(), 0700);
  *secret_path = directory + "/server.secret";
  std::string secret;
  if (std::ifstream file(*secret_path); file) std::getline(file, secret);
  if (secret.empty()) {
    std::string public_key;
    if (!transport::NewCurveKeyPair(&public_key, &secret)) {
      *error = "this build's ZeroMQ cannot make CURVE keys";
      return false;
    }
    if (!WriteFile(*secret_path, secret, 0600, error)) return false;
  }
  const std::string public_key = transport::CurvePublicKeyOf(secret);
  if (public_key.empty()) {
    *error = *secret_path + " does not hold a CURVE secret key";
    return false;
  }
  // The public half beside it, for operators to hand to clients (CURELAY_SERVER_KEY, a CDI spec, a Secret).
  if (!WriteFile(directory + "/server.public", public_key, 0644, error)) return false;
  keys->server_secret = secret;
  keys->server_public = public_key;
  return true;
}

}  // namespace curelay::backend
