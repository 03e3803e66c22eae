"""Device vendors: one module each, all behind the protocol in ``base``."""
