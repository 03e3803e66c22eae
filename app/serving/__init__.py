"""The HTTP edge: the gunicorn worker's loop apart from its sans-IO HTTP/1.1 protocol, the master, TLS, the views."""
