"""What a process sees: list + watch streams (stream), the tables they keep (tables), the Feed over them (feed) and
the FeedStreams that run its streams (life)."""
