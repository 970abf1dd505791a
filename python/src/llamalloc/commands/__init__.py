"""The `llamalloc` subcommands. commands/X.py is the command line of `llamalloc X`: its options, what it prints and
its exit status; it defines `command` (or `commands`, a list), which llamalloc.cli finds. The work behind it is in
llamalloc/X.py (llamalloc/X/ for a package), which other commands and the tests call:

    record, trace, run, simulate, bench, compare, demo, prepare, symbolize   llamalloc/<command>.py
    report                                                                    llamalloc/report/
    train, evaluate                                                           llamalloc/model/ (the lifetime model)

run.py is also the one place that starts a user's program (record, trace, compare, bench and demo start it
there); trace.py also reads traces. What several commands share is a module of its own: profile.py (the profile
format), allocators.py (the allocators bench and compare run under), workloads.py, files.py (writing a file
atomically), paths.py, errors.py."""
