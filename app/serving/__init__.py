"""The HTTP edge: the gunicorn worker and master, HTTP/1.1 framing, TLS, the views."""
