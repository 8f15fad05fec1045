"""A node's configuration: its settings from flags, environment and TOML, and
the origins its browsers may come from."""
