// mt-check: a multi-threaded C++ program that checks its own results, for running under a new allocator.
//
// Producers build messages of many sizes (std::string, std::vector, std::map, raw new[] and malloc buffers,
// over-aligned objects), fill them with a pattern derived from the message number and push them through
// bounded queues; consumers on other threads verify every byte and free them, so almost every free is a
// cross-thread free. Each consumer also keeps a few messages for a while (a sliding window) before freeing
// them, so lifetimes vary. At the end the totals are compared with what the producers sent.
// Exit status 0 and the line "mt-check: ok ..." only when every message arrived intact.
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common/random.h"

// mtcheck::BlockingQueue, in the program's namespace (blocking_queue.h says why).
#define WORKLOAD_QUEUE_NAMESPACE mtcheck
#include "common/blocking_queue.h"

namespace mtcheck {

inline std::uint64_t mix(std::uint64_t x) { return workloads::splitmix64(x); }

struct alignas(64) Aligned {
  std::uint64_t words[8];
};

struct Message {
  std::uint64_t number = 0;
  std::string text;
  std::vector<std::uint32_t> numbers;
  std::map<int, std::string> fields;
  std::unique_ptr<unsigned char[]> blob;
  std::size_t blob_bytes = 0;
  void* raw = nullptr;
  std::size_t raw_bytes = 0;
  std::unique_ptr<Aligned> aligned;

  ~Message() { std::free(raw); }
};

std::unique_ptr<Message> make_message(std::uint64_t number) {
  auto message = std::make_unique<Message>();
  message->number = number;
  std::uint64_t h = mix(number);
  message->text.assign(1 + h % 300, static_cast<char>('a' + number % 26));
  message->numbers.resize(h >> 8 & 0xff);
  for (std::size_t i = 0; i < message->numbers.size(); ++i) message->numbers[i] = static_cast<std::uint32_t>(number + i);
  for (int f = 0; f < static_cast<int>(h >> 16 & 7); ++f) message->fields[f] = std::to_string(number * 31 + f);
  // Now and then a large buffer (beyond small size classes, sometimes beyond a huge page).
  message->blob_bytes = (h >> 24 & 63) == 0 ? (1 + (h >> 32) % (3u << 20)) : (h >> 32) % 4096;
  message->blob.reset(new unsigned char[message->blob_bytes]);
  std::memset(message->blob.get(), static_cast<int>(number & 0xff), message->blob_bytes);
  message->raw_bytes = 1 + (h >> 40) % 512;
  message->raw = std::malloc(message->raw_bytes);
  if (message->raw == nullptr) throw std::bad_alloc();
  std::memset(message->raw, static_cast<int>((number >> 3) & 0xff), message->raw_bytes);
  if (h & 1) {
    message->aligned = std::make_unique<Aligned>();
    for (auto& w : message->aligned->words) w = number;
  }
  return message;
}

bool verify(const Message& message) {
  const std::uint64_t number = message.number;
  const std::uint64_t h = mix(number);
  if (message.text.size() != 1 + h % 300) return false;
  for (char c : message.text) if (c != static_cast<char>('a' + number % 26)) return false;
  if (message.numbers.size() != (h >> 8 & 0xff)) return false;
  for (std::size_t i = 0; i < message.numbers.size(); ++i) {
    if (message.numbers[i] != static_cast<std::uint32_t>(number + i)) return false;
  }
  if (message.fields.size() != (h >> 16 & 7)) return false;
  for (const auto& [f, value] : message.fields) if (value != std::to_string(number * 31 + f)) return false;
  for (std::size_t i = 0; i < message.blob_bytes; ++i) {
    if (message.blob[i] != static_cast<unsigned char>(number & 0xff)) return false;
  }
  const auto* raw = static_cast<const unsigned char*>(message.raw);
  for (std::size_t i = 0; i < message.raw_bytes; ++i) {
    if (raw[i] != static_cast<unsigned char>((number >> 3) & 0xff)) return false;
  }
  if (message.aligned) {
    if (reinterpret_cast<std::uintptr_t>(message.aligned.get()) % alignof(Aligned) != 0) return false;
    for (auto w : message.aligned->words) if (w != number) return false;
  }
  return true;
}

}  // namespace mtcheck

int main(int argc, char** argv) {
  using namespace mtcheck;
  const int producers = argc > 1 ? std::atoi(argv[1]) : 4;
  const int consumers = argc > 2 ? std::atoi(argv[2]) : 4;
  const std::uint64_t per_producer = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20000;
  if (producers < 1 || consumers < 1 || per_producer < 1) {
    std::fprintf(stderr, "usage: mt-check [PRODUCERS CONSUMERS MESSAGES_PER_PRODUCER]\n");
    return 2;
  }
  BlockingQueue<std::unique_ptr<Message>> queue(256);
  std::atomic<std::uint64_t> received{0}, corrupt{0}, number_sum{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::deque<std::unique_ptr<Message>> window;  // kept a while, then freed here
      std::unique_ptr<Message> message;
      while (queue.pop(message)) {
        if (!verify(*message)) ++corrupt;
        ++received;
        number_sum += message->number;
        window.push_back(std::move(message));
        if (window.size() > static_cast<std::size_t>(16 + c * 8)) {
          if (!verify(*window.front())) ++corrupt;
          window.pop_front();
        }
      }
      for (auto& kept : window) if (!verify(*kept)) ++corrupt;
    });
  }
  std::vector<std::thread> producer_threads;
  for (int p = 0; p < producers; ++p) {
    producer_threads.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per_producer; ++i) queue.push(make_message(p * per_producer + i));
    });
  }
  for (auto& t : producer_threads) t.join();
  queue.close();
  for (auto& t : threads) t.join();
  const std::uint64_t total = producers * per_producer;
  const std::uint64_t expected_sum = total * (total - 1) / 2;
  if (received != total || number_sum != expected_sum || corrupt != 0) {
    std::printf("mt-check: FAILED received=%" PRIu64 "/%" PRIu64 " corrupt=%" PRIu64 " sum=%" PRIu64 "/%" PRIu64 "\n",
                received.load(), total, corrupt.load(), number_sum.load(), expected_sum);
    return 1;
  }
  std::printf("mt-check: ok messages=%" PRIu64 " producers=%d consumers=%d\n", total, producers, consumers);
  return 0;
}
