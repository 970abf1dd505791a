"""The tokeniser of symbolised stack traces (the LLAMA paper, section 5.2, Figure 5)."""
from llamalloc.model.tokenizer import (FIRST_SIZE_TOKEN, FIRST_WORD_TOKEN, SEP, SPECIAL_TOKENS, UNK, UNSYMBOLIZED,
                                       Vocabulary, frame_words)

# Figure 5 of the paper, innermost frame first (the figure drops the angle brackets of the templates; the
# demangler does not, so they are put back here).
FIGURE_5 = [
    "__gnu_cxx::__g::__string_base<char, std::__g::char_traits<char>, std::__g::allocator<char> >"
    "::_M_reserve(unsigned long)",
    "proto2::internal::InlineGreedyStringParser(std::__g::basic_string<char, std::__g::char_traits<char>, "
    "std::__g::allocator<char> >*, char const*, proto2::internal::ParseContext*)",
    "proto2::FileDescriptorProto::_InternalParse(char const*, proto2::internal::ParseContext*)",
    "proto2::MessageLite::ParseFromArray(void const*, int)",
    "proto2::DescriptorPool::TryFindFileInFallbackDatabase(std::__g::basic_string<char, "
    "std::__g::char_traits<char>, std::__g::allocator<char> > const&) const",
    "proto2::DescriptorPool::FindFileByName(std::__g::basic_string<char, std::__g::char_traits<char>, "
    "std::__g::allocator<char> > const&) const",
    "proto2::internal::AssignDescriptors(proto2::internal::AssignDescriptorsTable*)",
    "system2::Algorithm_descriptor()",
    "system2::init_module_algorithm_parse()",
    "Initializer::TypeData::RunIfNecessary(Initializer*)",
    "Initializer::RunInitializers(char const*)",
    "RealInit(char const*, int*, char***, bool, bool)",
    "main",
]


def test_frames_split_on_special_characters():
    assert frame_words(FIGURE_5[3]) == ["proto2", "MessageLite", "ParseFromArray", "void", "const", "int"]
    assert frame_words(FIGURE_5[11]) == ["RealInit", "char", "const", "int", "bool"]
    assert frame_words(FIGURE_5[6]) == ["proto2", "internal", "AssignDescriptors", "AssignDescriptorsTable"]
    assert frame_words("Foo::~Foo() [clone .cold]") == ["Foo", "clone", "cold"]
    assert frame_words("0x7f3a00401a2b") == ["<unsymbolized>"]
    assert frame_words("main") == ["main"]


def test_name_words_come_first_each_word_once_and_at_most_eight():
    # The method name (_M_reserve) comes before the template arguments; repeated words (std, __g, char) appear
    # once; the parameter words (unsigned long) fall past the eighth word.
    assert frame_words(FIGURE_5[0]) == [
        "__gnu_cxx", "__g", "__string_base", "_M_reserve", "char", "std", "char_traits", "allocator"]
    assert frame_words("std::vector<unsigned char, std::allocator<unsigned char> >::vector(unsigned long, "
                       "std::allocator<unsigned char> const&)") == [
        "std", "vector", "unsigned", "char", "allocator", "long", "const"]
    assert frame_words("bool std::operator< <int>(int const&, int const&)")[:3] == ["bool", "std", "operator"]


def test_figure_5_sequence_is_innermost_first_with_frame_separators():
    vocab = Vocabulary.build([FIGURE_5])
    ids = vocab.encode(FIGURE_5, size_bucket=6, max_tokens=1000)
    words = [vocab.tokens[i] for i in ids]
    assert words[0] == "<size:6>"
    frames = " ".join(words[1:]).split(" @ ")
    assert len(frames) == len(FIGURE_5) and ids.count(SEP) == len(FIGURE_5) - 1
    assert frames[0] == "__gnu_cxx __g __string_base _M_reserve char std char_traits allocator"
    assert frames[3] == "proto2 MessageLite ParseFromArray void const int"
    assert frames[-1] == "main"
    assert UNK not in ids


def test_vocabulary_keeps_the_most_common_tokens_and_maps_the_rest_to_unk():
    vocab = Vocabulary.build([FIGURE_5], max_words=3)
    assert vocab.tokens[:FIRST_WORD_TOKEN] == SPECIAL_TOKENS
    # The most frequent words of Figure 5's frames: "char" (in 7 frames), "const" and "proto2" (6 each, ties in
    # string order), then "__g" and "std" (4 each).
    assert vocab.tokens[FIRST_WORD_TOKEN:] == ["char", "const", "proto2"]
    ids = vocab.encode(["proto2::MessageLite::ParseFromArray(char const*)"], size_bucket=0)
    assert ids == [FIRST_SIZE_TOKEN, FIRST_WORD_TOKEN + 2, UNK, UNK, FIRST_WORD_TOKEN, FIRST_WORD_TOKEN + 1]
    assert Vocabulary.build([FIGURE_5], max_words=5).tokens[FIRST_WORD_TOKEN:] == [
        "char", "const", "proto2", "__g", "std"]


def test_unseen_context_encodes_with_unknown_tokens():
    vocab = Vocabulary.build([FIGURE_5])
    ids = vocab.encode(["brand_new::Allocate(char const*, int)", "0xdeadbeef", "main"], size_bucket=3)
    assert ids == [FIRST_SIZE_TOKEN + 3, UNK, UNK, vocab.ids["char"], vocab.ids["const"], vocab.ids["int"], SEP,
                   UNSYMBOLIZED,
                   SEP, vocab.ids["main"]]


def test_sequences_are_cut_to_max_tokens_dropping_outer_frames():
    vocab = Vocabulary.build([FIGURE_5])
    ids = vocab.encode(FIGURE_5, size_bucket=60, max_tokens=20)
    assert len(ids) == 20
    assert ids[0] == FIRST_SIZE_TOKEN + 47  # size buckets saturate
    assert ids == vocab.encode(FIGURE_5, size_bucket=47, max_tokens=1000)[:20]
    batch, lengths = vocab.encode_batch([FIGURE_5, ["main"]], [1, 2], max_tokens=20)
    assert batch.shape == (2, 20) and lengths.tolist() == [20, 2]
    assert batch[1].tolist()[:3] == [FIRST_SIZE_TOKEN + 2, vocab.ids["main"], 0]


def test_call_site_words_are_one_token_and_only_of_binaries_the_vocabulary_knows():
    # Two allocations in one function (docs/model.md, "Call sites"): the same function names, two call sites.
    add = "<site:server/Summary::add(std::pair<int, int> const&)+"
    kept = ["Summary::add", add + "2b>", "main", "<site:server/main+3c>", "__libc_start_call_main"]
    temp = ["Summary::add", add + "40>", "main", "<site:server/main+3c>", "__libc_start_call_main"]
    assert frame_words(add + "2b>") == [add + "2b>"]
    vocab = Vocabulary.build([kept, temp])
    assert vocab.site_binaries == {"<site:server/"}
    a, b = vocab.encode(kept, 5), vocab.encode(temp, 5)
    assert a != b and len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
    assert vocab.ids[add + "2b>"] in a and vocab.ids[add + "40>"] in b
    # An unknown call site of the known binary is <unk>, as an unknown word.
    other = ["Summary::add", add + "ff>", "main", "<site:server/main+3c>", "__libc_start_call_main"]
    assert UNK in vocab.encode(other, 5) and len(vocab.encode(other, 5)) == len(a)
    # Another binary's call-site words (a model of one program meets another's frames), and every call-site word
    # for a model trained without them, are left out with their separators.
    foreign = ["Summary::add", "<site:client/Summary::add+2b>", "main", "__libc_start_call_main"]
    assert vocab.encode(foreign, 5) == vocab.encode(["Summary::add", "main", "__libc_start_call_main"], 5)
    plain = Vocabulary.build([["Summary::add", "main", "__libc_start_call_main"]])
    assert plain.encode(kept, 5) == plain.encode(["Summary::add", "main", "__libc_start_call_main"], 5)
    # A model trained on the words of file offsets ("<site:NAME+OFFSET>", which a rebuild moves) knows no
    # binary's words of today's spelling: it is given none, and sees the stacks it was trained on.
    offsets = Vocabulary.build([["Summary::add", "<site:server+1a2b>", "main", "__libc_start_call_main"]])
    assert offsets.site_binaries == set()
    assert offsets.encode(kept, 5) == offsets.encode(["Summary::add", "main", "__libc_start_call_main"], 5)
