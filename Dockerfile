# The controller image (`trainer controller`: reconcilers, webhook, probes, metrics).
#   docker build -t trainer-py:0.1.0 .
# The base is pinned by tag; pin it by digest as well in your registry mirror for reproducible
# builds. Its Python minor version must match the one constraints.txt was generated with.

# --- build: install the project and its pinned dependencies into a virtualenv ----------------
FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY trainer ./trainer
# trainer/data/runtimes links to runtimes/: the wheel needs both.
COPY runtimes ./runtimes
COPY webhooks ./webhooks
# Every runtime dependency is pinned by constraints.txt (hack/constraints.py writes it).
RUN python -m venv /opt/trainer \
    && /opt/trainer/bin/pip install --no-cache-dir --constraint constraints.txt . \
    && /opt/trainer/bin/python -m compileall -q /opt/trainer/lib \
    && /opt/trainer/bin/pip uninstall --yes pip

# --- final: the virtualenv on a clean base, no build tools, non-root ---------------------------
FROM python:3.11.11-slim-bookworm
ENV PATH=/opt/trainer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=build /opt/trainer /opt/trainer
# A numeric user, so Kubernetes can verify runAsNonRoot without a passwd entry.
USER 65532:65532
EXPOSE 8081 8443 9443
ENTRYPOINT ["trainer", "controller"]
