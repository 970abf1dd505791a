// image-server's HTTP/1.1: requests and responses, the parsing of a request's head and query, and a keep-alive
// connection that frames messages by Content-Length. The server and the load generator both use it.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_HTTP_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_HTTP_H

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <unistd.h>
#include <cctype>
#include <cerrno>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "image_server.h"

namespace IMGSRV_NAMESPACE::http {

struct Request {
  std::string method;
  std::string target;
  std::string path;
  std::string version;
  std::map<std::string, std::string> headers;
  std::unordered_map<std::string, std::string> query;

  // The value of the query's parameter `name`, or `fallback` when the query has none.
  std::string_view param(const char* name, std::string_view fallback) const {
    auto found = query.find(name);
    return found == query.end() ? fallback : std::string_view(found->second);
  }
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::string serialize() const {
    std::string reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Bad Request";
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
    for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    return head;
  }
};

inline std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::unordered_map<std::string, std::string> parse_query(std::string_view query) {
  std::unordered_map<std::string, std::string> params;
  for (const std::string& pair : util::split(query, '&')) {
    auto eq = pair.find('=');
    if (eq == std::string::npos) params[pair] = "";
    else params[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return params;
}

#if IMAGE_SERVER_REVISION >= 2
bool parse_request_line(std::string_view line, Request& request) {
  auto first = line.find(' ');
  auto second = line.rfind(' ');
  if (first == std::string_view::npos || second == first) return false;
  request.method = std::string(line.substr(0, first));
  request.target = std::string(line.substr(first + 1, second - first - 1));
  request.version = std::string(line.substr(second + 1));
  return true;
}

bool parse_head(std::string_view head, Request& request) {
  auto lines = util::split(head, '\n');
  if (lines.empty()) return false;
  for (std::string& line : lines) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
  }
  if (!parse_request_line(lines[0], request)) return false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    auto colon = lines[i].find(':');
    if (colon == std::string::npos) return false;
    std::size_t value_start = lines[i].find_first_not_of(' ', colon + 1);
    request.headers[lower(lines[i].substr(0, colon))] =
        value_start == std::string::npos ? "" : lines[i].substr(value_start);
  }
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = parse_query(std::string_view(request.target).substr(question + 1));
  return true;
}
#else
// Parses the head of a request (request line and headers, without the blank line).
bool parse_head(const std::string& head, Request& request) {
  std::istringstream stream(head);
  std::string line;
  if (!std::getline(stream, line)) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::istringstream request_line(line);
  if (!(request_line >> request.method >> request.target >> request.version)) return false;
  while (std::getline(stream, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) return false;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    request.headers[lower(line.substr(0, colon))] = value;
  }
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = parse_query(request.target.substr(question + 1));
  return true;
}
#endif

// One TCP connection with its read buffer; knows how to frame HTTP/1.1 messages with Content-Length.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Reads up to the blank line; returns the head without it, or nothing at EOF or error.
  std::optional<std::string> read_head() {
    for (;;) {
      auto end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = buffer_.substr(0, end);
        buffer_.erase(0, end + 4);
        return head;
      }
      if (buffer_.size() > (1u << 20) || !fill()) return std::nullopt;
    }
  }

  std::optional<std::string> read_body(std::size_t length) {
    while (buffer_.size() < length) {
      if (!fill()) return std::nullopt;
    }
    std::string body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return body;
  }

  bool write_all(std::string_view data) {
    while (!data.empty()) {
      ssize_t sent = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (sent <= 0) {
        if (sent < 0 && errno == EINTR) continue;
        return false;
      }
      data.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

 private:
  bool fill() {
    char chunk[64 * 1024];
    for (;;) {
      ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
      if (got > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(got));
        return true;
      }
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
  }

  int fd_;
  std::string buffer_;
};

}  // namespace IMGSRV_NAMESPACE::http

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_HTTP_H
