"""What a process sees: list + watch streams (stream), the tables they keep (tables), and the Feed over them."""
