# One image for the webhook (default command) and the certgen Jobs (command: certgen ...).

# Build stage: wheels of the project and of every dependency, at the versions pinned in constraints.txt
# (scripts/lock.sh regenerates it).
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY constraints.txt pyproject.toml setup.cfg README.md ./
COPY app ./app
# app/preview/mutatingwebhookconfiguration.yaml links to it: the wheel carries the configuration `review` evaluates.
COPY manifests/base/mutatingwebhookconfiguration.yaml ./manifests/base/
COPY certgen ./certgen
RUN pip wheel --constraint constraints.txt --wheel-dir /wheels .

# Runtime stage: the same slim base, installed offline from those wheels (bind-mounted, so no wheel, compiler
# or build backend stays in the image).
FROM python:3.11.14-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    pip install --no-cache-dir --no-index --find-links=/wheels --constraint=/tmp/constraints.txt hami-webhook
WORKDIR /srv
COPY wsgi.py gunicorn.conf.py ./
# Non-root, and nothing written at run time: gunicorn's heartbeat files go to /dev/shm,
# so the container runs with readOnlyRootFilesystem: true.
USER 65532:65532
EXPOSE 9443 9090
ENTRYPOINT ["hami-webhook"]
CMD ["serve"]
