"""One module per subcommand group; each defines `command` or `commands` (click). See llamalloc.cli."""
