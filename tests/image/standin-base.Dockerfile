# TEST-ONLY stand-in for upstream's CUDA 13 image (lmsysorg/sglang:v<version>-cu130), which cannot
# be pulled here (no Docker Hub). Built by tests/image_standin.py from Debian and PyPI only:
# FROM is a Debian bookworm root file system made with debootstrap and `docker import`.
#
# It stands where the real base stands for `docker/Dockerfile`: system python3, pip allowed to
# install system-wide, SGLang installed editable from its source under /sgl-workspace/sglang/python
# on top of its pinned dependencies (upstream: `pip install -e "python[all]"` from a git clone).
# docs/deploy.md lists every way it differs from the real base. The CPU harness
# (tests/smoke/cpu_harness) lives here and only here: never in the product image's own layers.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_NO_CACHE_DIR=1 \
    PIP_DEFAULT_TIMEOUT=180

# This machine reaches PyPI through an egress proxy with its own CA: trust the CAs the host trusts
# locally (the directory may be empty), for pip here and in docker/Dockerfile's RUN steps.
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

# SGLang's dependencies exactly as the tests' runtime venv pins them (tests/runtime-requirements-<version>.txt).
COPY runtime-requirements.txt /tmp/runtime-requirements.txt
RUN python3 -m pip install --no-deps --progress-bar off -r /tmp/runtime-requirements.txt \
 && rm /tmp/runtime-requirements.txt

# SGLang itself, as upstream's image has it: editable from the release's source (checked from /:
# in /sgl-workspace, `sglang/` would shadow it as a namespace package). Its build backend needs
# setuptools-scm (pinned; Debian's setuptools and wheel serve the rest, no build isolation).
# A wheel-only release (0.5.11 on: no sdist on PyPI) installs its cp311 wheel instead, into
# site-packages; upstream's image still builds it from a git clone (docs/lines.md, "Images").
ARG SETUPTOOLS_SCM_VERSION=8.3.1
ARG SGLANG_SDIST=
ARG SGLANG_WHEEL=
WORKDIR /sgl-workspace
RUN --mount=type=bind,target=/tmp/ctx \
    if [ -n "${SGLANG_WHEEL}" ]; then \
      python3 -m pip install --no-deps "/tmp/ctx/${SGLANG_WHEEL}" && mkdir -p sglang/python; \
    else \
      python3 -m pip install --no-deps "setuptools-scm==${SETUPTOOLS_SCM_VERSION}" \
      && mkdir -p sglang \
      && tar -xzf "/tmp/ctx/${SGLANG_SDIST}" -C sglang \
      && mv sglang/"${SGLANG_SDIST%.tar.gz}" sglang/python \
      && python3 -m pip install --no-deps --no-build-isolation -e sglang/python \
      && cd / && python3 -c "import importlib.util as iu; o = iu.find_spec('sglang').origin; \
assert o.startswith('/sgl-workspace/sglang/python/'), o; print('editable sglang at', o)"; \
    fi

# The test-only CPU harness: activated per container with `-e SGLPATCH_CPU_HARNESS=1`.
COPY cpu_harness/ /opt/sglpatch-cpu-harness/
COPY libcuda.so.1 /opt/sglpatch-cpu-harness/lib/libcuda.so.1
ENV PYTHONPATH=/opt/sglpatch-cpu-harness \
    SGLPATCH_STUB_LIBCUDA=/opt/sglpatch-cpu-harness/lib/libcuda.so.1

WORKDIR /sgl-workspace/sglang
