# The controller image (`trainer controller`: reconcilers, webhook, probes, metrics).
#   docker build -t trainer-py:0.1.0 .
# The data-cache image (`trainer data-cache serve`, run by the cache-initializer step of the
# torch-distributed-with-cache runtime; docs/data-cache.md):
#   docker build --target data-cache -t trainer-py-data-cache:0.1.0 .
# The base is pinned by tag; pin it by digest as well in your registry mirror for reproducible
# builds. Its Python (3.11), architecture (x86_64) and glibc (2.36) are those requirements.lock
# is resolved for (hack/lock.py).

# --- build: install the project and its locked dependencies into a virtualenv ----------------
# requirements.lock (`make lock`) pins every package, the build backend included: PIP_CONSTRAINT
# reaches pip's isolated build environment too. `python -m venv` (3.11) also puts ensurepip's own
# pip and setuptools in the virtualenv, versions the base image chooses and the lock does not pin;
# nothing imports them at run time, so both go once the install is done.
FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/requirements.lock
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY trainer ./trainer
# trainer/data/runtimes links to runtimes/: the wheel needs both.
COPY runtimes ./runtimes
COPY webhooks ./webhooks
RUN python -m venv /opt/trainer \
    && /opt/trainer/bin/pip install --no-cache-dir --constraint requirements.lock . \
    && /opt/trainer/bin/python -m compileall -q /opt/trainer/lib \
    && /opt/trainer/bin/pip uninstall --yes pip setuptools

# --- data cache: the same install plus the datacache extra, from the same lock ---------------
FROM python:3.11.11-slim-bookworm AS build-data-cache
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/requirements.lock
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY trainer ./trainer
COPY runtimes ./runtimes
COPY webhooks ./webhooks
RUN python -m venv /opt/trainer \
    && /opt/trainer/bin/pip install --no-cache-dir --constraint requirements.lock '.[datacache]' \
    && /opt/trainer/bin/python -m compileall -q /opt/trainer/lib \
    && /opt/trainer/bin/pip uninstall --yes pip setuptools

FROM python:3.11.11-slim-bookworm AS data-cache
ENV PATH=/opt/trainer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=build-data-cache /opt/trainer /opt/trainer
USER 65532:65532
EXPOSE 50051
ENTRYPOINT ["trainer", "data-cache", "serve"]

# --- final: the virtualenv on a clean base, no build tools, non-root ---------------------------
FROM python:3.11.11-slim-bookworm
ENV PATH=/opt/trainer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=build /opt/trainer /opt/trainer
# A numeric user, so Kubernetes can verify runAsNonRoot without a passwd entry.
USER 65532:65532
EXPOSE 8081 8443 9443 10443
ENTRYPOINT ["trainer", "controller"]
