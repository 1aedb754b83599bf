"""The per-rank trace: record layout, the mmap writer, and the damage-tolerant reader."""
