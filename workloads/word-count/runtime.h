// word-count's job runtime around the stages, as a dataflow framework has one: a task plan per stage, a job
// log, stage statistics, round checkpoints and process-wide counters. It does not touch the words; it is here
// because a real pipeline allocates much of its memory in such code, through the same helpers as the stages
// (strings, vectors, maps), and it is the runtime's role, not the helper, that decides how long an allocation
// lives (the LLAMA paper, section 2.2): task names die at once, a stage's task plan lives the stage, job-log
// lines the next 256 lines, round checkpoints two rounds, stage statistics the job, counters for good (never
// freed).
//
// Part of word-count's one translation unit (word_count.h says why): word_count.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_WORD_COUNT_RUNTIME_H
#define LLAMALLOC_WORKLOADS_WORD_COUNT_RUNTIME_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "word_count.h"

namespace WC_NAMESPACE::WC_RUNTIME {

struct TaskSpec {
  std::string name;
  std::string stage;
  std::size_t shard = 0;
  std::vector<std::string> inputs;
};
using TaskPlan = std::vector<std::unique_ptr<TaskSpec>>;

inline std::string task_name(const char* stage, int round, std::size_t shard) {
  return std::string(stage) + "/round-" + std::to_string(round) + "/shard-" + std::to_string(shard);
}

class JobLog {
 public:
  void line(std::string text) {
    std::lock_guard<std::mutex> lock(mutex_);
    recent_.push_back(std::move(text));
    if (recent_.size() > 256) recent_.pop_front();
  }

 private:
  std::mutex mutex_;
  std::deque<std::string> recent_;
};

class StageStats {
 public:
  void finish(const char* stage, int round, std::uint64_t tasks, double seconds) {
    auto record = std::make_unique<Record>();
    record->stage = stage;
    record->tasks = tasks;
    record->seconds = seconds;
    std::lock_guard<std::mutex> lock(mutex_);
    records_[std::string(stage) + ":" + std::to_string(round)] = std::move(record);
  }

 private:
  struct Record {
    std::string stage;
    std::uint64_t tasks = 0;
    double seconds = 0;
  };
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Record>> records_;
};

// The manifest of each finished round; the last two are kept (what a restart would resume from).
class Checkpoints {
 public:
  void commit(int round, const TaskPlan& plan) {
    auto manifest = std::make_unique<Manifest>();
    manifest->round = round;
    for (const auto& task : plan) manifest->tasks.push_back(task->name);
    manifests_.push_back(std::move(manifest));
    if (manifests_.size() > 2) manifests_.pop_front();
  }

 private:
  struct Manifest {
    int round = 0;
    std::vector<std::string> tasks;
  };
  std::deque<std::unique_ptr<Manifest>> manifests_;
};

// Process-wide counters, created on first use and never freed (leaked on purpose, as such registries are).
class Counters {
 public:
  static Counters& instance() {
    static Counters* counters = new Counters;
    return *counters;
  }
  void add(const std::string& name, std::uint64_t value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& counter = counters_[name];
    if (!counter) counter = std::make_unique<std::uint64_t>(0);
    *counter += value;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<std::uint64_t>> counters_;
};

#if WORDCOUNT_REVISION >= 2
class TaskPlanner {
 public:
  TaskPlan make_tasks(const char* stage, int round, std::size_t shards) {
#else
class Scheduler {
 public:
  TaskPlan plan(const char* stage, int round, std::size_t shards) {
#endif
    TaskPlan tasks;
    for (std::size_t s = 0; s < shards; ++s) {
      auto task = std::make_unique<TaskSpec>();
      task->name = task_name(stage, round, s);
      task->stage = stage;
      task->shard = s;
      task->inputs.push_back("shard-" + std::to_string(s));
      tasks.push_back(std::move(task));
    }
    return tasks;
  }
};

// One stage of a round: its task plan lives while `body` runs; each finished task writes a log line.
struct Job {
  JobLog log;
  StageStats stats;
  Checkpoints checkpoints;
#if WORDCOUNT_REVISION >= 2
  TaskPlanner planner;
#else
  Scheduler scheduler;
#endif
};

template <typename Body>
#if WORDCOUNT_REVISION >= 2
// Revision 2 runs every stage through this wrapper, an extra frame in every stage's stacks.
[[gnu::noinline]]
#endif
TaskPlan run_stage(Job& job, const char* stage, int round, std::size_t shards, Body&& body) {
  auto started = std::chrono::steady_clock::now();
#if WORDCOUNT_REVISION >= 2
  TaskPlan tasks = job.planner.make_tasks(stage, round, shards);
#else
  TaskPlan tasks = job.scheduler.plan(stage, round, shards);
#endif
  body(tasks);
  Counters::instance().add(std::string(stage) + ".tasks", tasks.size());
  job.stats.finish(stage, round, tasks.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return tasks;
}

inline void task_done(Job& job, const TaskSpec& task, std::uint64_t items) {
  job.log.line(task.name + " done: " + std::to_string(items) + " items");
}

}  // namespace WC_NAMESPACE::WC_RUNTIME

#endif  // LLAMALLOC_WORKLOADS_WORD_COUNT_RUNTIME_H
