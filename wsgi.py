"""gunicorn entry point: ``gunicorn -c gunicorn.conf.py wsgi:app``.

gunicorn imports this module in each worker after the fork (preload_app stays off),
so every worker starts its own quota feed (threads do not survive a fork).
"""

from app import create_app

app = create_app()
