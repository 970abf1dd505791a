"""The `llamalloc` subcommands. commands/X.py is the command line of `llamalloc X`: its options, what it prints and
its exit status; it defines `command` (or `commands`, a list), which llamalloc.cli finds. The work behind it is in
llamalloc/X.py (llamalloc/X/ for a package), which other commands and the tests call:

    record, trace, run, simulate, bench, compare, demo, prepare, symbolize   llamalloc/<command>.py
    report                                                                    llamalloc/report/
    train, evaluate                                                           llamalloc/model/ (the lifetime model)

run.py is also the one place that starts a user's program (record, trace, compare and bench start it there). The
files the commands write and read have modules of their own: profile.py (profiles), trace.py (traces), files.py
(writing any file atomically)."""
