"""Tokens of symbolised stack traces (the LLAMA paper, section 5.2).

Each frame is a demangled function name. It is split into words at every character that is not part of an
identifier (`:`, `,`, `(`, `)`, `<`, `>`, `*`, `&`, spaces, `[`, `]`, `~`, `.` ...): a word is a maximal run of
ASCII letters, digits, `_` and non-ASCII characters. The words of the function's own qualified name (outside
any `<>`, `()` or `[]`) come first, then the words of its template and parameter lists; each word is kept once
per frame, and at most WORDS_PER_FRAME words. Without this, the templated allocator plumbing that inlining puts
at the top of every C++ stack (`std::allocator_traits<std::allocator<T> >::allocate(std::allocator<T>&, ...)`)
ate most of the 128-token budget: in image-server's profile, the first application frame started at token 103
(median) and one stack in ten never reached one; with these rules it starts at token 65. A frame that is an
unsymbolised address ("0x<hex>") becomes the single token <unsymbolized>, and a call-site word
("<site:BINARY/FUNCTION+OFFSET>", which follows each frame of the program's own binary,
llamalloc.profile.site_frame) is one token too. Frames are separated by the token `@`.

The sequence of a calling context is

    <size:k>  tokens(frame 0)  @  tokens(frame 1)  @ ...      (frame 0 = innermost, where malloc was called)

cut to `max_tokens`, so the outermost frames are the ones dropped. Tokens outside the vocabulary map to <unk>.

Token ids (the same in the model file and in the allocator):
  0 <pad>, 1 <unk>, 2 @, 3 <unsymbolized>, 4 .. 4+47 <size:0> .. <size:47>, then the vocabulary's tokens,
  most common first (counted once per occurrence in the distinct training stacks; ties in string order).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from ..profile import is_site_frame as is_site_word, site_binary_prefix
from .classes import MODEL_SIZE_BUCKETS

PAD, UNK, SEP, UNSYMBOLIZED = 0, 1, 2, 3
FIRST_SIZE_TOKEN = 4
FIRST_WORD_TOKEN = FIRST_SIZE_TOKEN + MODEL_SIZE_BUCKETS
SPECIAL_TOKENS = ["<pad>", "<unk>", "@", "<unsymbolized>"] + [f"<size:{k}>" for k in range(MODEL_SIZE_BUCKETS)]

DEFAULT_VOCAB_WORDS = 5000
DEFAULT_MAX_TOKENS = 128

WORDS_PER_FRAME = 8

_WORD_OR_BRACKET = re.compile(r"[A-Za-z0-9_\u0080-\U0010ffff]+|[<>()\[\]]")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def frame_words(frame: str) -> list[str]:
    """The tokens of one frame, as strings ("<unsymbolized>" for a raw address): the name's words, then the
    template and parameter lists' words, each once, at most WORDS_PER_FRAME."""
    if _ADDRESS.fullmatch(frame):
        return [SPECIAL_TOKENS[UNSYMBOLIZED]]
    if is_site_word(frame):
        return [frame]  # a call-site word (llamalloc.profile.site_frame) is one token
    depth = 0
    name_words: list[str] = []
    argument_words: list[str] = []
    for match in _WORD_OR_BRACKET.finditer(frame):
        w = match.group()
        if w in "<([":
            depth += 1
        elif w in ">)]":
            depth = max(0, depth - 1)
        else:
            (argument_words if depth else name_words).append(w)
    return list(dict.fromkeys(name_words + argument_words))[:WORDS_PER_FRAME]


class Vocabulary:
    """Token strings <-> ids. `tokens[i]` is the string of id i; specials come first (see module doc)."""

    def __init__(self, tokens: Sequence[str]):
        tokens = list(tokens)
        if tokens[:FIRST_WORD_TOKEN] != SPECIAL_TOKENS:
            raise ValueError("vocabulary does not start with the special tokens")
        self.tokens = tokens
        self.ids = {t: i for i, t in enumerate(tokens)}
        self._frame_cache: dict[str, list[int]] = {}
        # The binaries whose call-site words the model knows ("<site:NAME/"): another binary's site words are
        # dropped (a model of one program meets another's frames; `prepare` applies the same rule). The words of
        # models trained before the words named the function ("<site:NAME+OFFSET>") name no binary here: such a
        # model is given no call-site words, as one trained before call-site words.
        self.site_binaries = {site_binary_prefix(t) for t in tokens if is_site_word(t)} - {""}

    def keeps_frame(self, frame: str) -> bool:
        """False for a call-site word of a binary the vocabulary has none of."""
        return not is_site_word(frame) or site_binary_prefix(frame) in self.site_binaries

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def build(cls, stacks: Iterable[Sequence[str]], max_words: int = DEFAULT_VOCAB_WORDS) -> "Vocabulary":
        """The `max_words` most common tokens of the distinct `stacks`, after the special tokens."""
        frame_counts: Counter[str] = Counter()
        for stack in set(tuple(s) for s in stacks):
            frame_counts.update(stack)
        word_counts: Counter[str] = Counter()
        for frame, n in frame_counts.items():
            for w in frame_words(frame):
                word_counts[w] += n
        special = set(SPECIAL_TOKENS)
        ranked = sorted((w for w in word_counts if w not in special), key=lambda w: (-word_counts[w], w))
        return cls(SPECIAL_TOKENS + ranked[:max(0, max_words)])

    def frame_ids(self, frame: str) -> list[int]:
        ids = self._frame_cache.get(frame)
        if ids is None:
            ids = [self.ids.get(w, UNK) for w in frame_words(frame)]
            self._frame_cache[frame] = ids
        return ids

    def encode(self, stack: Sequence[str], size_bucket: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> list[int]:
        """Token ids of one context: the size token, then the frames innermost first, cut to max_tokens."""
        sc = min(max(int(size_bucket), 0), MODEL_SIZE_BUCKETS - 1)
        ids = [FIRST_SIZE_TOKEN + sc]
        for i, frame in enumerate(f for f in stack if self.keeps_frame(f)):
            if i:
                ids.append(SEP)
            ids.extend(self.frame_ids(frame))
            if len(ids) >= max_tokens:
                break
        return ids[:max_tokens]

    def encode_batch(self, stacks: Sequence[Sequence[str]], size_buckets: Sequence[int],
                     max_tokens: int = DEFAULT_MAX_TOKENS) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded ids int32 [n, max_tokens] (padding 0) and lengths int32 [n]."""
        ids = np.zeros((len(stacks), max_tokens), dtype=np.int32)
        lengths = np.zeros(len(stacks), dtype=np.int32)
        for row, (stack, sc) in enumerate(zip(stacks, size_buckets)):
            seq = self.encode(stack, sc, max_tokens)
            ids[row, :len(seq)] = seq
            lengths[row] = len(seq)
        return ids, lengths
