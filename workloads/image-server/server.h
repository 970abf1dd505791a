// image-server's network server: the listening socket on 127.0.0.1, the accept thread and the workers that
// serve keep-alive connections.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVER_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "http.h"
#include "image_server.h"
#include "service.h"

namespace IMGSRV_NAMESPACE::net {

class Server {
 public:
  Server(service::ImageService& service, int workers, int port) : service_(service) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0) fail("socket");
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // only 127.0.0.1, never another interface
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("bind 127.0.0.1");
    if (::listen(listen_fd_, 128) != 0) fail("listen");
    socklen_t length = sizeof address;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~Server() { stop(); }

  int port() const { return port_; }

  void stop() {
    if (stopped_.exchange(true)) return;
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    ::close(listen_fd_);
    connections_.close();
    for (std::thread& worker : workers_) worker.join();
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "image-server: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
  }

  void accept_loop() {
    for (;;) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;
      }
      connections_.push(fd);
    }
  }

  void worker_loop() {
    while (auto fd = connections_.pop()) serve(std::make_unique<http::Connection>(*fd));
  }

  void serve(std::unique_ptr<http::Connection> connection) {
    while (auto head = connection->read_head()) {
      http::Request request;
      http::Response response;
      if (!http::parse_head(*head, request)) {
        response.status = 400;
        response.body = "malformed request\n";
      } else {
        response = service_.handle(request);
      }
      if (!connection->write_all(response.serialize()) || !connection->write_all(response.body)) return;
    }
  }

  service::ImageService& service_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
  util::BlockingQueue<int> connections_;
};

}  // namespace IMGSRV_NAMESPACE::net

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVER_H
