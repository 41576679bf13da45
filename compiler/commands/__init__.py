"""One module per subcommand: register(subparsers) -> sets func(args) -> dict."""
