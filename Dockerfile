# tokenload's container image: the package is installed at build time, never at pod start.
#
#   docker build -t REGISTRY/tokenload:0.1.0 .
#
# The base image is pinned by its full version tag. Production builds should pin the digest as
# well (it cannot be looked up offline, so it is not written here):
#   docker buildx imagetools inspect python:3.11.9-slim-bookworm    # -> sha256:...
#   FROM python:3.11.9-slim-bookworm@sha256:<digest>
# No secret goes into the image: the API key reaches the pod as an environment variable from a
# Kubernetes Secret (see k8s/README.md).
FROM python:3.11.9-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/tokenload

# Only what the package needs to build (README.md is the package's readme).
COPY pyproject.toml README.md ./
COPY tokenload/ tokenload/
COPY locustfiles/ locustfiles/
RUN pip install --no-cache-dir . \
    && groupadd --system --gid 10001 tokenload \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin tokenload

# Numeric, so that Kubernetes' runAsNonRoot can verify it (k8s/ runs it as 10001 too).
USER 10001:10001
ENV HOME=/tmp

# 5557: Locust master <- workers; 8089: Locust web UI; 8000: `tokenload sim`.
EXPOSE 5557 8089 8000

# The Kubernetes manifests always give the command; this default only shows the commands.
CMD ["tokenload", "--help"]
