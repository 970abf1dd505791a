// A C++ test program for the learned predictor: std::thread workers (started through libstdc++'s trampoline,
// which keeps no frame pointer) allocating with new, std::string and std::vector from distinct calling
// contexts, built -O2 with frame pointers like the workloads. Prints "ok <checksum>".
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace app {

struct Record {
  long key;
  std::string name;
};

__attribute__((noinline)) std::unique_ptr<Record> make_record(long key) {
  return std::make_unique<Record>(Record{key, "record-" + std::to_string(key) + "-with-a-long-enough-name"});
}

__attribute__((noinline)) std::vector<int> scratch_buffer(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

__attribute__((noinline)) long serve(int id, std::vector<std::unique_ptr<Record>>& kept) {
  long sum = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<int> v = scratch_buffer(16 + i % 200);
    sum += v.back();
    if (i % 100 == 0) kept.push_back(make_record(id * 100000L + i));
  }
  return sum;
}

}  // namespace app

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 4;
  std::vector<std::vector<std::unique_ptr<app::Record>>> kept(n);
  std::vector<long> sums(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back([t, &kept, &sums] { sums[t] = app::serve(t, kept[t]); });
  for (auto& t : threads) t.join();
  long total = 0;
  for (long s : sums) total += s;
  for (auto& k : kept) total += long(k.size());
  std::printf("ok %ld\n", total);
  return 0;
}
