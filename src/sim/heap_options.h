// The library's options (LLAMALLOC_<NAME>, src/llamalloc/options.h) as the replay takes them: NAME=VALUE pairs
// parsed by the library's own parser (set_option, which read_options uses), so that a value the library refuses is
// refused here, in the library's words, and a replay under NAME=VALUE is the library under LLAMALLOC_NAME=VALUE.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "options.h"

namespace llamalloc::sim {

// The options that decide where the heap places objects (alloc/heap_config.h); a replay's summary lists their
// values ("heap_options").
inline constexpr const char* kPlacementOptionNames[] = {"DEFAULT_CLASS",    "DEADLINE_K",   "SAME_CLASS_RECYCLING",
                                                        "SMALL_HEAP_PAGES", "SHARED_CLASS", "LONG_CLASS",
                                                        "SPAN_RECYCLING",   "DENSE_FIRST"};

// The value of an integer option of the table, by name (without LLAMALLOC_). Throws std::invalid_argument for a
// name that is not one.
uint64_t integer_option(const Options& options, const std::string& name);

// Whether NAME (without LLAMALLOC_) is an option of the library's table.
bool is_option_name(const std::string& name);

// Sets an integer option of the table by name (without LLAMALLOC_), to a value the library's parser takes (see
// option_value). Throws std::invalid_argument for a name that is not one.
void set_integer_option(Options& options, const std::string& name, uint64_t value);

// The value of NAME=VALUE as the library's parser reads it, for an integer option of the table (NAME without
// LLAMALLOC_). Throws std::invalid_argument with one line, "<flag> NAME=VALUE: <the library's reason>", for a
// name that is not an option or a value the library would refuse.
uint64_t option_value(const std::string& flag, const std::string& name, const std::string& value);

// Options from "NAME=VALUE" assignments (NAME with or without LLAMALLOC_; a later one of a name wins), the others
// at their defaults. Throws std::invalid_argument with one line naming the assignment for a name that is not an
// option (with the closest option's name when one is near), a value the library would refuse, or an option a
// flag of its own gives (MODEL: --model, TOKENS: --tokens, PREDICT_LOG: --predict-log). An option the replay
// does not model (the statistics file, the sweeper's period, ...) stays at its default, and `warn` gets a line
// naming it.
Options parse_heap_options(const std::vector<std::string>& assignments,
                           const std::function<void(const std::string&)>& warn);

}  // namespace llamalloc::sim
