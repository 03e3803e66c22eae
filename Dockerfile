# One image for the webhook (default) and the certgen Job (command: certgen ...).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.cfg README.md ./
COPY app ./app
COPY certgen ./certgen
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY wsgi.py gunicorn.conf.py /srv/
WORKDIR /srv
# Non-root, and nothing written at run time: gunicorn's heartbeat files go to /dev/shm,
# so the container runs with readOnlyRootFilesystem: true.
USER 65532:65532
EXPOSE 9443
ENTRYPOINT ["hami-webhook"]
CMD ["serve"]
