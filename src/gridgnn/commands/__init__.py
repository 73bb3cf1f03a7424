"""Front ends of the `gridgnn partition` and `gridgnn shard` commands (argument parsing, reports)."""
