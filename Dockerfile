# syntax=docker/dockerfile:1.7
#
# attested-replay runner image: runs `attested-replay run` inside a Confidential Containers pod.
#
# Base image: pinned by digest so that a rebuild cannot silently pick up another Python.
# The digest below is the one a public third-party build record gives for
# python:3.11-slim-bookworm; it was NOT pulled or checked on the machine that wrote this file
# (no container engine, no registry access there). Before the first build, and whenever you
# refresh the base, check it or replace it with the current one:
#     docker buildx imagetools inspect python:3.11-slim-bookworm --format '{{json .Manifest.Digest}}'
#     (or: crane digest python:3.11-slim-bookworm)
# Reproducible build: docker buildx build --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     --output type=image,name=REPO,rewrite-timestamp=true .
ARG PYTHON_BASE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_BASE} AS build
ARG SOURCE_DATE_EPOCH=0
# PIP_CONSTRAINT also reaches pip's isolated build environment (setuptools, wheel).
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/constraints.txt \
    PYTHONDONTWRITEBYTECODE=1 \
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH}
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY attestation/ attestation/
COPY runner/ runner/
COPY simulated_amd/ simulated_amd/
COPY tenant/ tenant/
# install-command: tests/evidence/test_image.py runs this pip command with the same arguments.
RUN python -m venv /opt/attested-replay \
    && /opt/attested-replay/bin/pip install --no-compile --only-binary=:all: --constraint constraints.txt /src

# The runtime image is the Python base's files under a config of our own: FROM scratch, so the
# image's environment is exactly the ENV below. The Job sets the same variables and the Kata agent
# policy pins them (runner/k8s/job.py RUNNER_ENV): a variable inherited from the base image, or
# one the host adds, would make the agent refuse the container.
FROM ${PYTHON_BASE} AS python

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="attested-replay" \
      org.opencontainers.image.description="Backtest replays bound into AMD SEV-SNP attestation reports" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
# The whole base filesystem on purpose: only its config (ENV, WORKDIR, USER) is left behind.
# hadolint ignore=DL3067
COPY --from=python / /
# Read-only root filesystem: nothing may write outside /tmp and /replay/out (both volumes in
# the Job). State and caches under /tmp, HOME for libraries that want one. No PYTHON* variable:
# the entrypoint's isolated interpreter (-I) ignores them all.
ENV PATH=/opt/attested-replay/bin:/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8 \
    HOME=/tmp \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    ATTESTED_REPLAY_STATE_DIR=/tmp/attested-replay
COPY --from=build /opt/attested-replay /opt/attested-replay
WORKDIR /replay/out
# Numeric UID/GID so that Kubernetes runAsNonRoot can check it without /etc/passwd.
USER 10001:10001
# The Job's command (runner/k8s/job.py RUNNER_COMMAND): python -I ignores every PYTHON* variable
# and the user site, and keeps the working directory off sys.path, so the pod's environment and
# volumes cannot load code; -B and -u: no .pyc writes on the read-only root, unbuffered output.
ENTRYPOINT ["/opt/attested-replay/bin/python", "-I", "-B", "-u", "-m", "runner", "run"]
