# Controller and webhook image. Build: docker build -t trainer-py:dev .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY trainer ./trainer
# trainer/data/runtimes is a link to runtimes/: both are needed to build the wheel.
COPY runtimes ./runtimes
COPY webhooks ./webhooks
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
COPY runtimes /opt/trainer/runtimes
COPY manifests/base/crds /opt/trainer/crds
# Non-root, matching the Deployment's runAsNonRoot / readOnlyRootFilesystem settings.
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin trainer
USER 65532:65532
ENTRYPOINT ["trainer"]
CMD ["--help"]
