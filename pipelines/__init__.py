"""shardforge's Apache Beam data jobs (never imports torch)."""
