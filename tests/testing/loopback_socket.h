// A TCP socket on a free loopback port, for tests of clients facing a peer
// that does not answer: bound only (nothing listens, connections are
// refused), or listening (connections are accepted, never served).
#pragma once

#include "gtest/gtest.h"
#include <netinet/in.h>
#include <sys/socket.h>

namespace arbiter::testing {

// A socket bound to a free loopback port, listening when `listen_too`.
// Returns the descriptor (the caller closes it) and sets `port`.
inline int BoundSocket(bool listen_too, int& port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  if (listen_too) {
    EXPECT_EQ(listen(fd, 4), 0);
  }
  socklen_t len = sizeof addr;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace arbiter::testing
