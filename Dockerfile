# syntax=docker/dockerfile:1
# The mnemoflow image: the Faust workers, and the Ray head and CPU workers that run the Serve applications
# (api, extractor, embedder; llm with an OpenAI-compatible upstream) and the shard and curator actors.
# The GPU variant for the vLLM `llm` deployment is Dockerfile.vllm.
#
#   docker build -t REGISTRY/mnemoflow:0.1.0 .
#   docker build --build-arg PYTHON_VERSION=3.12.12 -t REGISTRY/mnemoflow:0.1.0-py312 .   # beside Dockerfile.vllm
#
# Ray needs one Python minor and one Ray version on every node of a cluster: a cluster that also runs the vLLM
# image (Python 3.12) takes the py312 build of this one. Ray is pinned in tools/constraints-cluster.txt.
ARG PYTHON_VERSION=3.11.14
ARG DEBIAN=bookworm

# --- build: compilers may be needed by a dependency without a wheel; they stay in this stage ---------------
FROM python:${PYTHON_VERSION}-slim-${DEBIAN} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY tools/install.sh tools/constraints-cluster.txt tools/
COPY mnemoflow mnemoflow
COPY streams streams
COPY actors actors
COPY serving serving
# The same script `make install` runs (and so CI, on every run); no llama.cpp: the cluster calls vLLM or an
# OpenAI-compatible server. The o200k vocabulary and e5's onnxruntime graph (the default engine for a new index) are
# written into the image: the root filesystem is read-only, so neither could be made at run time.
RUN PYTHON=python VENV=/opt/mnemoflow EXTRAS=runtime,embed,sqlite,milvus EDITABLE=0 \
    CONSTRAINTS=tools/constraints-cluster.txt bash tools/install.sh \
 && /opt/mnemoflow/bin/python -c "import serving.builder, streams.worker, ray; print('ray', ray.__version__)" \
 && /opt/mnemoflow/bin/python -m mnemoflow.tokens --write-vocabulary /opt/mnemoflow/tiktoken \
 && /opt/mnemoflow/bin/python -m mnemoflow.embedding.e5 --build-graph /opt/mnemoflow/models

# --- final: the venv and a non-root user, no compilers ------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim-${DEBIAN}
# wget: KubeRay's default readiness and liveness probes of Ray pods run it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends wget \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 mnemoflow \
 && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/mnemoflow --shell /usr/sbin/nologin mnemoflow
COPY --from=build /opt/mnemoflow /opt/mnemoflow
# The root filesystem is read-only in k8s/: /tmp (Ray's session folder) and /data are volumes there.
ENV PATH=/opt/mnemoflow/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/mnemoflow \
    MNEMOFLOW_DATA_DIR=/data \
    TIKTOKEN_CACHE_DIR=/opt/mnemoflow/tiktoken \
    MNEMOFLOW_MODELS_DIR=/opt/mnemoflow/models \
    RAY_USAGE_STATS_ENABLED=0
USER 10001:10001
WORKDIR /home/mnemoflow
EXPOSE 8000
CMD ["python", "-m", "streams.worker", "worker", "--loglevel", "warning"]
