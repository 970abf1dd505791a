// A trampoline into the program's main for libraries that interpose __libc_start_main (the allocator's
// before-exit statistics, src/llamalloc/override/start.cc; the profiler's teardown rule, src/profiler/
// interpose.cc). It calls `before()` (which registers an atexit handler), then *jumps* to `program_main` with
// the registers and stack as they were: main's frame and return address stay the ones it always has, so stack
// walks -- and the calling contexts the profiler records and the model predicts from -- are unchanged (a
// wrapper frame would change every context). The three pushes keep the call 16-byte aligned.
//
//   LLAMALLOC_DEFINE_MAIN_TRAMPOLINE(name, before, program_main)
// defines `extern "C" int name(int, char**, char**)`; `before` is an extern "C" function and `program_main` an
// extern "C" variable holding main's address, both of the calling library (hidden is fine).
#pragma once

#if defined(__x86_64__)
#define LLAMALLOC_DEFINE_MAIN_TRAMPOLINE(name, before, program_main)                                              \
  extern "C" int name(int, char**, char**);                                                                   \
  asm(".text\n"                                                                                               \
      "  .p2align 4\n"                                                                                        \
      "  .type " #name ", @function\n" #name ":\n"                                                             \
      "  .cfi_startproc\n"                                                                                    \
      "  endbr64\n"                                                                                           \
      "  pushq %rdi\n"                                                                                        \
      "  .cfi_adjust_cfa_offset 8\n"                                                                          \
      "  pushq %rsi\n"                                                                                        \
      "  .cfi_adjust_cfa_offset 8\n"                                                                          \
      "  pushq %rdx\n"                                                                                        \
      "  .cfi_adjust_cfa_offset 8\n"                                                                          \
      "  call " #before "\n"                                                                                  \
      "  popq %rdx\n"                                                                                         \
      "  .cfi_adjust_cfa_offset -8\n"                                                                         \
      "  popq %rsi\n"                                                                                         \
      "  .cfi_adjust_cfa_offset -8\n"                                                                         \
      "  popq %rdi\n"                                                                                         \
      "  .cfi_adjust_cfa_offset -8\n"                                                                         \
      "  jmp *" #program_main "(%rip)\n"                                                                      \
      "  .cfi_endproc\n"                                                                                      \
      "  .size " #name ", .-" #name "\n");
#else
// Elsewhere a sibling call (-O2) does the same; without it main runs one frame deeper.
#define LLAMALLOC_DEFINE_MAIN_TRAMPOLINE(name, before, program_main)                                              \
  extern "C" int name(int argc, char** argv, char** envp) {                                                   \
    before();                                                                                                 \
    return program_main(argc, argv, envp);                                                                    \
  }
#endif
