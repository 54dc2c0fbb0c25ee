"""shardforge's lean torch trainer (never imports apache_beam)."""
