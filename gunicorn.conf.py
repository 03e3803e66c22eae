"""gunicorn configuration: ``gunicorn -c gunicorn.conf.py wsgi:app``. Settings come from HAMI_* env vars."""

from app.serving.master import *  # noqa: F403
