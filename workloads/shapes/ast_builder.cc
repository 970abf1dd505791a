// ast-builder: a compiler front end. Generated modules of `let NAME = EXPR;` statements are lexed into tokens,
// parsed into trees of small nodes and evaluated; identifiers are interned in a symbol table that lives to the
// end. The peak is a whole-program link that keeps every module's tree alive at once; after it, modules are
// compiled one at a time and each tree is dropped.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "shapes.h"

namespace shapes {

namespace compiler {

enum class Kind : std::uint8_t { kNumber, kName, kAdd, kSub, kMul, kXor, kCall };

struct Node {
  Kind kind;
  std::uint64_t value = 0;
  const std::string* symbol = nullptr;
  std::vector<std::unique_ptr<Node>> children;
};

struct Statement {
  const std::string* name;
  std::unique_ptr<Node> expression;
};

struct Module {
  std::string source;
  std::vector<Statement> statements;
  std::vector<std::uint64_t> expected;
  std::int64_t bytes = 0;
};

class SymbolTable {
 public:
  explicit SymbolTable(LiveBytes& live) : live_(live) {}
  const std::string* intern(std::string_view text) {
    auto found = symbols_.find(std::string(text));
    if (found != symbols_.end()) return &*found;
    live_.add(static_cast<std::int64_t>(text.size() + 48));
    return &*symbols_.emplace(text).first;
  }
  std::size_t size() const { return symbols_.size(); }
  bool contains(const std::string& text) const { return symbols_.count(text) != 0; }

 private:
  LiveBytes& live_;
  std::unordered_set<std::string> symbols_;
};

// The source generator writes an expression and computes its value at the same time.
class SourceWriter {
 public:
  SourceWriter(std::uint64_t module, std::string& out) : module_(module), random_(module * 7 + 1), out_(out) {}

  std::uint64_t expression(int depth, const std::vector<std::uint64_t>& values) {
    const std::uint64_t pick = random_.below(depth >= 4 ? 2 : 7);
    if (pick == 0 || (pick == 1 && values.empty())) {
      const std::uint64_t n = random_.below(100000);
      out_ += std::to_string(n);
      return n;
    }
    if (pick == 1) {
      const std::size_t i = random_.below(values.size());
      out_ += variable_name(module_, i);
      return values[i];
    }
    if (pick == 6) {
      out_ += "mix(";
      const std::uint64_t a = expression(depth + 1, values);
      out_ += ", ";
      const std::uint64_t b = expression(depth + 1, values);
      out_ += ")";
      return a * 31 + (b ^ 0x5bd1e995);
    }
    static const char kOps[] = {'+', '-', '*', '^'};
    const char op = kOps[pick - 2];
    out_ += "(";
    const std::uint64_t a = expression(depth + 1, values);
    out_ += ' ';
    out_ += op;
    out_ += ' ';
    const std::uint64_t b = expression(depth + 1, values);
    out_ += ")";
    switch (op) {
      case '+': return a + b;
      case '-': return a - b;
      case '*': return a * b;
      default: return a ^ b;
    }
  }

  static std::string variable_name(std::uint64_t module, std::size_t i) {
    return "module_" + std::to_string(module) + "_value_" + std::to_string(i);
  }

 private:
  std::uint64_t module_;
  XorShift random_;
  std::string& out_;
};

Module generate_module(std::uint64_t module, std::size_t statements) {
  Module out;
  out.source.reserve(statements * 64);
  SourceWriter writer(module, out.source);
  for (std::size_t i = 0; i < statements; ++i) {
    out.source += "let " + SourceWriter::variable_name(module, i) + " = ";
    out.expected.push_back(writer.expression(0, out.expected));
    out.source += ";\n";
  }
  return out;
}

struct Token {
  Kind kind;  // kNumber, kName, or an operator; punctuation as kCall with the character in value
  std::string text;
  std::uint64_t value = 0;
};

std::vector<Token> lex(const std::string& source) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < source.size()) {
    const char c = source[i];
    if (c == ' ' || c == '\n') {
      ++i;
    } else if (c >= '0' && c <= '9') {
      std::uint64_t n = 0;
      while (i < source.size() && source[i] >= '0' && source[i] <= '9') n = n * 10 + (source[i++] - '0');
      tokens.push_back(Token{Kind::kNumber, {}, n});
    } else if ((c >= 'a' && c <= 'z') || c == '_') {
      const std::size_t begin = i;
      while (i < source.size() && (std::isalnum(static_cast<unsigned char>(source[i])) || source[i] == '_')) ++i;
      tokens.push_back(Token{Kind::kName, source.substr(begin, i - begin), 0});
    } else {
      tokens.push_back(Token{Kind::kCall, {}, static_cast<std::uint64_t>(c)});
      ++i;
    }
  }
  return tokens;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, SymbolTable& symbols, LiveBytes& live, std::int64_t& bytes)
      : tokens_(tokens), symbols_(symbols), live_(live), bytes_(bytes) {}

  bool parse_module(std::vector<Statement>& out) {
    while (at_ < tokens_.size()) {
      if (!is_name("let")) return false;
      ++at_;
      if (at_ >= tokens_.size() || tokens_[at_].kind != Kind::kName) return false;
      const std::string* name = symbols_.intern(tokens_[at_++].text);
      if (!is_punct('=')) return false;
      ++at_;
      std::unique_ptr<Node> expression = parse_expression();
      if (expression == nullptr || !is_punct(';')) return false;
      ++at_;
      out.push_back(Statement{name, std::move(expression)});
    }
    return true;
  }

 private:
  bool is_name(const char* text) const {
    return at_ < tokens_.size() && tokens_[at_].kind == Kind::kName && tokens_[at_].text == text;
  }
  bool is_punct(char c) const {
    return at_ < tokens_.size() && tokens_[at_].kind == Kind::kCall &&
           tokens_[at_].value == static_cast<std::uint64_t>(c);
  }

  std::unique_ptr<Node> make_node(Kind kind) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    const std::int64_t bytes = sizeof(Node);
    bytes_ += bytes;
    live_.add(bytes);
    return node;
  }

  std::unique_ptr<Node> parse_expression() {
    if (at_ >= tokens_.size()) return nullptr;
    const Token& token = tokens_[at_];
    if (token.kind == Kind::kNumber) {
      ++at_;
      auto node = make_node(Kind::kNumber);
      node->value = token.value;
      return node;
    }
    if (token.kind == Kind::kName && token.text == "mix") {
      ++at_;
      if (!is_punct('(')) return nullptr;
      ++at_;
      auto node = make_node(Kind::kCall);
      node->symbol = symbols_.intern("mix");
      node->children.push_back(parse_expression());
      if (!is_punct(',')) return nullptr;
      ++at_;
      node->children.push_back(parse_expression());
      if (!is_punct(')') || node->children[0] == nullptr || node->children[1] == nullptr) return nullptr;
      ++at_;
      add_children_bytes(*node);
      return node;
    }
    if (token.kind == Kind::kName) {
      ++at_;
      auto node = make_node(Kind::kName);
      node->symbol = symbols_.intern(token.text);
      return node;
    }
    if (!is_punct('(')) return nullptr;
    ++at_;
    std::unique_ptr<Node> left = parse_expression();
    if (left == nullptr || at_ >= tokens_.size() || tokens_[at_].kind != Kind::kCall) return nullptr;
    Kind kind;
    switch (static_cast<char>(tokens_[at_].value)) {
      case '+': kind = Kind::kAdd; break;
      case '-': kind = Kind::kSub; break;
      case '*': kind = Kind::kMul; break;
      case '^': kind = Kind::kXor; break;
      default: return nullptr;
    }
    ++at_;
    std::unique_ptr<Node> right = parse_expression();
    if (right == nullptr || !is_punct(')')) return nullptr;
    ++at_;
    auto node = make_node(kind);
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    add_children_bytes(*node);
    return node;
  }

  void add_children_bytes(const Node& node) {
    const std::int64_t bytes = static_cast<std::int64_t>(node.children.capacity() * sizeof(void*));
    bytes_ += bytes;
    live_.add(bytes);
  }

  const std::vector<Token>& tokens_;
  SymbolTable& symbols_;
  LiveBytes& live_;
  std::int64_t& bytes_;
  std::size_t at_ = 0;
};

class Evaluator {
 public:
  std::uint64_t evaluate(const Node& node) {
    switch (node.kind) {
      case Kind::kNumber: return node.value;
      case Kind::kName: {
        auto found = values_.find(node.symbol);
        return found == values_.end() ? 0 : found->second;
      }
      case Kind::kAdd: return evaluate(*node.children[0]) + evaluate(*node.children[1]);
      case Kind::kSub: return evaluate(*node.children[0]) - evaluate(*node.children[1]);
      case Kind::kMul: return evaluate(*node.children[0]) * evaluate(*node.children[1]);
      case Kind::kXor: return evaluate(*node.children[0]) ^ evaluate(*node.children[1]);
      case Kind::kCall: return evaluate(*node.children[0]) * 31 + (evaluate(*node.children[1]) ^ 0x5bd1e995);
    }
    return 0;
  }
  void bind(const std::string* name, std::uint64_t value) { values_[name] = value; }

 private:
  std::unordered_map<const std::string*, std::uint64_t> values_;
};

class Compiler {
 public:
  explicit Compiler(LiveBytes& live) : live_(live), symbols_(live) {}

  std::unique_ptr<Module> front_end(std::uint64_t module, std::size_t statements) {
    auto out = std::make_unique<Module>(generate_module(module, statements));
    out->bytes = static_cast<std::int64_t>(out->source.capacity() + 8 * out->expected.capacity());
    live_.add(out->bytes);
    const std::vector<Token> tokens = lex(out->source);
    Parser parser(tokens, symbols_, live_, out->bytes);
    if (!parser.parse_module(out->statements)) ++parse_errors_;
    return out;
  }

  // Evaluates every statement and compares with the generator's values; returns their sum.
  std::uint64_t check(const Module& module) {
    Evaluator evaluator;
    std::uint64_t sum = 0;
    if (module.statements.size() != module.expected.size()) {
      ++wrong_values_;
      return 0;
    }
    for (std::size_t i = 0; i < module.statements.size(); ++i) {
      const std::uint64_t value = evaluator.evaluate(*module.statements[i].expression);
      evaluator.bind(module.statements[i].name, value);
      if (value != module.expected[i]) ++wrong_values_;
      sum += value;
    }
    return sum;
  }

  void release(std::unique_ptr<Module> module) {
    live_.sub(module->bytes);
    module.reset();
  }

  SymbolTable& symbols() { return symbols_; }
  std::uint64_t errors() const { return parse_errors_ + wrong_values_; }

 private:
  LiveBytes& live_;
  SymbolTable symbols_;
  std::uint64_t parse_errors_ = 0;
  std::uint64_t wrong_values_ = 0;
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t linked = options.scaled(48);
  const std::uint64_t separate = options.scaled(160);
  const std::size_t statements = 900;
  Compiler compiler(live);
  std::uint64_t checksum = 0;
  const PhaseStart start;
  // The whole-program link: every module's tree alive at once.
  std::vector<std::unique_ptr<Module>> program;
  for (std::uint64_t m = 0; m < linked; ++m) program.push_back(compiler.front_end(m, statements));
  for (const auto& module : program) checksum += compiler.check(*module);
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  for (auto& module : program) compiler.release(std::move(module));
  program.clear();
  // Then separate compilation: one tree at a time.
  for (std::uint64_t m = linked; m < linked + separate; ++m) {
    std::unique_ptr<Module> module = compiler.front_end(m, statements);
    checksum += compiler.check(*module);
    compiler.release(std::move(module));
  }
  end_phase(report, start);
  report.operations = (linked + separate) * statements;
  report.live_bytes = live.now();
  report.checksum = checksum;
  if (compiler.errors() != 0) report.fail(std::to_string(compiler.errors()) + " parse errors or wrong values");
  const std::size_t symbols = compiler.symbols().size();
  if (symbols != (linked + separate) * statements + 1) report.fail("the symbol table lost or duplicated a name");
  // The idle compiler server answers symbol lookups.
  XorShift idle(options.seed * 19);
  std::uint64_t unknown = 0;
  report.steady_state = run_quiet_phase(options, [&] {
    const std::uint64_t module = idle.below(linked + separate);
    if (!compiler.symbols().contains(SourceWriter::variable_name(module, idle.below(statements)))) ++unknown;
    return live.now();
  }, "\"symbols\": " + std::to_string(symbols));
  if (unknown != 0) report.fail("a symbol vanished during the quiet phase");
  report.add("modules", linked + separate);
  report.add("linked_modules", linked);
  report.add("symbols", symbols);
  return report;
}

}  // namespace compiler

}  // namespace shapes
