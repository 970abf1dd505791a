"""llamalloc: a learned, lifetime-aware huge-page allocator and its toolchain.

The `llamalloc` command (llamalloc.cli) is the front door; each subcommand lives in llamalloc.commands.
"""
__version__ = "0.1.0"
